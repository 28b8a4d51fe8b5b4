import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { TorchDbgConnection } from '../../connection/connection';
import { availability } from '../../model/availability';
import { IActionArgs } from '../../protocol/messages';
import {
  ActionButton,
  MaxNormInput,
  parseMaxNorm
} from '../../ui/clipControls';
import { useSignalRender } from '../../ui/useSignalRender';
import { RankAlarms } from './alarms';
import { RankCharts } from './charts';
import { RankGrid } from './grid';
import { RankScale } from './heatmap';
import { SCALE_ABOVE } from './scale';
import { RanksActionName, RanksModel } from './model';
import { sendRanksAction } from './send';
import { ShardedNorm } from './sharded';

/** The pending all-rank action's name as a word ("clip", "pause", ...). */
export function pendingLabel(action: string, trans: TranslationBundle): string {
  switch (action.replace(/^ranks_/, '')) {
    case 'clip':
      return trans.__('clip');
    case 'unclip':
      return trans.__('unclip');
    case 'pause':
      return trans.__('pause');
    case 'scale_lr':
      return trans.__('LR change');
    default:
      return action;
  }
}

/**
 * The job in one line: "2 ranks · running", what is agreed for a coming step
 * ("pending: clip at step 57"), where the ranks are held, the all-rank clip
 * and LR scale, and connections and messages the endpoint refused.
 */
export function RanksHeader(props: {
  model: RanksModel;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { model, trans } = props;
  const job = model.job;
  if (!job) {
    return null;
  }
  const attached = model.ranks.length;
  const refused = model.endpoint?.refused ?? 0;
  const lr = model.lrScale;
  return (
    <div
      className="jp-TorchDbg-ranksHeader"
      data-job-state={job.state}
      data-job={job.id}
    >
      <span className="jp-TorchDbg-ranksWorld">
        {attached < job.world_size
          ? trans.__(
              '%1 of %2 ranks attached',
              String(attached),
              String(job.world_size)
            )
          : trans._n('%1 rank', '%1 ranks', job.world_size)}
      </span>
      <span className="jp-TorchDbg-ranksJobState" data-state={job.state}>
        {job.state === 'running' ? trans.__('running') : trans.__('ended')}
      </span>
      {job.transport === 'tcp' && (
        <span
          className="jp-TorchDbg-chip"
          title={trans.__('Workers reach the kernel over TCP')}
        >
          {trans.__('tcp')}
        </span>
      )}
      {job.pending && (
        <span
          className="jp-TorchDbg-chip jp-TorchDbg-ranksPending"
          title={trans.__(
            'Agreed by every rank: each applies it before this optimizer step'
          )}
        >
          {trans.__(
            'pending: %1 at step %2',
            pendingLabel(job.pending.action, trans),
            String(job.pending.at_step)
          )}
        </span>
      )}
      {job.paused_at !== null && (
        <span className="jp-TorchDbg-chip jp-TorchDbg-ranksPaused">
          {trans.__('paused at step %1', String(job.paused_at))}
        </span>
      )}
      {model.clip !== null && (
        <span className="jp-TorchDbg-chip jp-mod-ok jp-TorchDbg-ranksClip">
          {trans.__('clip %1', String(model.clip))}
        </span>
      )}
      {lr !== 1 && (
        <span className="jp-TorchDbg-chip jp-mod-ok jp-TorchDbg-ranksLr">
          {trans.__('LR ×%1', String(Number(lr.toPrecision(4))))}
        </span>
      )}
      {refused > 0 && (
        <span
          className="jp-TorchDbg-chip jp-TorchDbg-warn jp-TorchDbg-ranksRefused"
          title={trans.__(
            'Connections and messages this kernel refused: without its key, forged, replayed, from another job or wire version, oversized or over the rate limit'
          )}
        >
          {trans._n('%1 refused', '%1 refused', refused)}
        </span>
      )}
    </div>
  );
}

/**
 * The all-rank actions: clip (max_norm), unclip, pause, resume and LR ×0.5,
 * each applied by every rank at one agreed optimizer step. The ack ("clip 1
 * applies at step 57 on ranks 0, 1") or the refusal is shown under them; the
 * buttons are off, with the reason, once the job has ended.
 */
export function RanksActions(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element {
  const { conn, trans } = props;
  const model = conn.model.ranks;
  const [maxNorm, setMaxNorm] = useState('1.0');
  const note = model.note;
  const clipValue = parseMaxNorm(maxNorm);
  const endedWhy = trans.__('The job has ended: no rank is left to act on.');
  // what can run now: the same answer the palette's commands get
  const can = availability(conn.model, trans);
  const act = <K extends RanksActionName>(action: K, args: IActionArgs[K]) => {
    void sendRanksAction(conn, action, args, trans);
  };
  const title = (why: string, what: string) => why || what;
  return (
    <div className="jp-TorchDbg-ranksActions">
      <div className="jp-TorchDbg-controls">
        <MaxNormInput
          value={maxNorm}
          onChange={setMaxNorm}
          trans={trans}
          className="jp-TorchDbg-ranksClipInput"
          ariaLabel={trans.__('max norm for every rank')}
        />
        <ActionButton
          kind="accept"
          label={trans.__('Clip all ranks')}
          disabled={!can.ranksClip.enabled || clipValue === null}
          title={title(
            can.ranksClip.why ||
              (clipValue !== null ? '' : trans.__('Enter a max norm above 0')),
            trans.__(
              'Clip gradients on every rank from one agreed step (after the all-reduce: replicas stay identical)'
            )
          )}
          onClick={() =>
            clipValue !== null && act('ranks_clip', { max_norm: clipValue })
          }
        />
      </div>
      <div className="jp-TorchDbg-controls">
        <ActionButton
          kind="reject"
          label={trans.__('Unclip')}
          disabled={!can.ranksUnclip.enabled}
          title={title(
            can.ranksUnclip.why,
            trans.__('Stop clipping on every rank from one agreed step')
          )}
          onClick={() => act('ranks_unclip', {})}
        />
        <ActionButton
          kind="reject"
          label={trans.__('Pause all')}
          disabled={!can.ranksPause.enabled}
          title={title(
            can.ranksPause.why,
            trans.__('Hold every rank before one agreed optimizer step')
          )}
          onClick={() => act('ranks_pause', {})}
        />
        <ActionButton
          kind="accept"
          label={trans.__('Resume all')}
          disabled={!can.ranksResume.enabled}
          title={title(
            can.ranksResume.why,
            trans.__('Release every paused rank')
          )}
          onClick={() => act('ranks_resume', {})}
        />
        <ActionButton
          kind="reject"
          label={trans.__('LR ×0.5 all')}
          disabled={!can.ranksScaleLr.enabled}
          title={title(
            can.ranksScaleLr.why,
            trans.__(
              'Halve every param group’s learning rate on every rank at one agreed step'
            )
          )}
          onClick={() => act('ranks_scale_lr', { factor: 0.5 })}
        />
      </div>
      {model.ended && (
        <div className="jp-TorchDbg-note jp-TorchDbg-ranksEnded">
          {endedWhy}
        </div>
      )}
      {note && (
        <div
          className="jp-TorchDbg-note jp-TorchDbg-ranksNote"
          data-kind={note.kind}
          role={note.kind === 'refused' ? 'alert' : 'status'}
        >
          {note.text}
        </div>
      )}
    </div>
  );
}

/**
 * The Ranks section: the processes of a torch.distributed job started from
 * the notebook (or attached to it), live: the job line, the rank grid, the
 * all-rank actions, the rank alarms and the per-rank charts.
 */
export function RanksPanel(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { conn, trans } = props;
  const model = conn.model.ranks;
  useSignalRender(model.changed);
  if (!model.job) {
    return null;
  }
  return (
    <div className="jp-TorchDbg-ranks" data-job-state={model.job.state}>
      <RanksHeader model={model} trans={trans} />
      <ShardedNorm job={model.job} trans={trans} />
      {model.ranks.length > SCALE_ABOVE ? (
        <RankScale model={model} trans={trans} />
      ) : (
        <RankGrid model={model} trans={trans} />
      )}
      <RanksActions conn={conn} trans={trans} />
      <RankAlarms alarms={model.alarms} trans={trans} />
      <RankCharts model={model} trans={trans} />
    </div>
  );
}
