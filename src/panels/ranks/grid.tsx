import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { wireNumber } from '../../protocol/messages';
import { formatCompact } from '../../ui/formatCompact';
import {
  formatMemory,
  formatSeconds,
  stateLabel,
  troubleLabel
} from './format';
import { type RankNow, RanksModel } from './model';

/**
 * The rank grid: one row per rank (rank, state badge, steps taken; then step
 * time, own time, gradient norm and memory under one header). A failed, lost,
 * stalled, hanging, desynced or straggling rank is highlighted and tagged.
 * Four columns, so it fits a 250 px sidebar. Above `SCALE_ABOVE` ranks the
 * panel shows `RankScale` (heatmap.tsx) instead: the outliers' rows only.
 */
export function RankGrid(props: {
  model: RanksModel;
  trans: TranslationBundle;
}): JSX.Element {
  const { model, trans } = props;
  return <RankRows model={model} trans={trans} ranks={model.ranks} />;
}

/**
 * The grid's rows for `ranks` (every rank, or the outliers with `reasons`:
 * why each is shown, as a tag).
 */
export function RankRows(props: {
  model: RanksModel;
  trans: TranslationBundle;
  ranks: readonly RankNow[];
  reasons?: ReadonlyMap<number, string>;
}): JSX.Element {
  const { model, trans, ranks, reasons } = props;
  return (
    <div
      className="jp-TorchDbg-rankGrid"
      role="table"
      aria-label={reasons ? trans.__('Outlying ranks') : trans.__('Ranks')}
    >
      <div className="jp-TorchDbg-rankHead" role="row">
        <span
          role="columnheader"
          title={trans.__(
            'Wall time of the last step (optimizer step to step)'
          )}
        >
          {trans.__('time')}
        </span>
        <span
          role="columnheader"
          title={trans.__(
            'The part of a step spent outside torch collectives and backward: the rank’s own work'
          )}
        >
          {trans.__('own')}
        </span>
        <span
          role="columnheader"
          title={
            model.job?.sharded
              ? trans.__(
                  'The norm of this rank’s shards of the gradients (FSDP); the global norm is above'
                )
              : trans.__(
                  'Total gradient norm after the all-reduce (equal on every rank unless desynced)'
                )
          }
        >
          {model.job?.sharded ? trans.__('shard') : trans.__('grad')}
        </span>
        <span role="columnheader" title={trans.__('Memory of the rank')}>
          {trans.__('memory')}
        </span>
      </div>
      {ranks.map(r => {
        const id = r.identity;
        const trouble = model.trouble(id.rank);
        const tag = troubleLabel(trouble, trans) ?? reasons?.get(id.rank);
        const state = stateLabel(r.state, trans);
        const grad = r.grad_norm === null ? null : wireNumber(r.grad_norm);
        const who = [
          id.host,
          trans.__('pid %1', String(id.pid)),
          id.launcher,
          id.local_rank !== null
            ? trans.__('local rank %1', String(id.local_rank))
            : ''
        ]
          .filter(Boolean)
          .join(' · ');
        return (
          <div
            key={id.rank}
            className={`jp-TorchDbg-rankRow${trouble ? ' jp-mod-trouble' : ''}`}
            role="row"
            data-rank={id.rank}
            data-state={r.state}
            data-step={r.step}
            data-trouble={trouble ?? undefined}
            data-outlier={reasons?.has(id.rank) ? '' : undefined}
          >
            <div className="jp-TorchDbg-rankLine" role="rowheader">
              <span className="jp-TorchDbg-rankId" title={who}>
                {trans.__('rank %1', String(id.rank))}
              </span>
              <span
                className="jp-TorchDbg-rankState"
                data-state={r.state}
                title={state.title}
              >
                {state.text}
              </span>
              {tag && (
                <span
                  className="jp-TorchDbg-rankTrouble"
                  title={trans.__('See the rank alarms below')}
                >
                  {tag}
                </span>
              )}
              <span
                className="jp-TorchDbg-rankStep"
                title={
                  r.since_step_s !== null
                    ? trans.__(
                        'Optimizer steps taken; the last %1 ago',
                        formatSeconds(r.since_step_s)
                      )
                    : trans.__('Optimizer steps taken')
                }
              >
                {trans.__('step %1', String(r.step))}
              </span>
            </div>
            <span role="cell" className="jp-TorchDbg-rankTime">
              {formatSeconds(r.step_time_s)}
            </span>
            <span role="cell" className="jp-TorchDbg-rankOwn">
              {formatSeconds(r.own_time_s)}
            </span>
            <span
              role="cell"
              className={`jp-TorchDbg-rankGrad${
                grad !== null && !Number.isFinite(grad) ? ' jp-mod-bad' : ''
              }`}
              title={
                r.grad_step !== null
                  ? trans.__('at step %1', String(r.grad_step))
                  : undefined
              }
            >
              {grad === null ? '—' : formatCompact(grad, 2)}
            </span>
            <span
              role="cell"
              className="jp-TorchDbg-rankMem"
              title={
                r.memory_kind === 'cuda'
                  ? trans.__('CUDA memory allocated')
                  : trans.__('Resident memory (RSS) of the process')
              }
            >
              {formatMemory(r.memory_bytes)}
            </span>
          </div>
        );
      })}
    </div>
  );
}
