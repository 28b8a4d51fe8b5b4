import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect, useState } from 'react';

import { TorchDbgConnection } from '../../connection/connection';
import { availability, rankJobRunning } from '../../model/availability';
import {
  ActionButton,
  MaxNormInput,
  parseMaxNorm
} from '../../ui/clipControls';
import { useSignalRender } from '../../ui/useSignalRender';
import { LrEditor } from './lrEditor';
import { ControlAct, sendControl } from './sendControl';
import { ControlStateLine } from './stateLine';

export { formatLr, MAX_LR, parseLr } from './lr';

/**
 * Whether a multi-process job is running on this kernel; re-renders only when
 * that changes (the ranks model changes up to 10 times a second).
 */
function useRankJob(conn: TorchDbgConnection): boolean {
  const ranks = conn.model.ranks;
  const [running, setRunning] = useState(() => rankJobRunning(conn.model));
  useEffect(() => {
    const update = () => setRunning(rankJobRunning(conn.model));
    update();
    ranks.changed.connect(update);
    return () => {
      ranks.changed.disconnect(update);
    };
  }, [conn, ranks]);
  return running;
}

/**
 * Clip, pause / resume / single step and the learning rate of the running
 * loop. Everything shown is what the kernel reports (its `control` message):
 * the LR of each param group is the optimizer's own, read at the step.
 */
export function ControlPanel(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element {
  const { conn, trans } = props;
  const control = conn.model.control;
  useSignalRender(control.changed);
  const rankJob = useRankJob(conn);
  const [maxNorm, setMaxNorm] = useState('1.0');
  const [note, setNote] = useState('');
  const [, rerender] = useState(0);
  const state = control.state;
  const truthful = state?.targets !== undefined;
  // no state yet (torch not imported, or before the first message): nothing to act on
  const idle = control.idle || state === null;
  const running = control.running;
  // what can run now: the same answer the palette's commands get
  const can = availability(conn.model, trans);
  const act: ControlAct = (action, args, done) => {
    setNote('');
    void sendControl(conn, action, args).then(error => {
      setNote(error);
      done?.(error);
    });
  };
  const clipValue = parseMaxNorm(maxNorm);

  return (
    <div
      className="jp-TorchDbg-control"
      data-idle={idle ? 'true' : 'false'}
      data-running={running ? 'true' : 'false'}
      data-rank-job={rankJob ? 'true' : 'false'}
    >
      <ControlStateLine conn={conn} trans={trans} rankJob={rankJob} />
      <div className="jp-TorchDbg-controls">
        <MaxNormInput value={maxNorm} onChange={setMaxNorm} trans={trans} />
        <ActionButton
          kind="accept"
          label={trans.__('Clip')}
          disabled={clipValue === null || !can.clip.enabled}
          title={can.clip.why}
          onClick={() =>
            clipValue !== null && act('clip', { max_norm: clipValue })
          }
        />
        <ActionButton
          kind="reject"
          label={trans.__('Stop clipping')}
          disabled={!can.unclip.enabled}
          title={can.unclip.why}
          onClick={() => act('unclip', {})}
        />
      </div>
      <div className="jp-TorchDbg-controls">
        {state?.paused ? (
          <>
            <ActionButton
              kind="accept"
              label={trans.__('Resume')}
              disabled={!can.resume.enabled}
              title={can.resume.why}
              onClick={() => act('resume', {})}
            />
            <ActionButton
              kind="reject"
              label={trans.__('Step')}
              disabled={!can.step.enabled}
              title={can.step.why}
              onClick={() => act('step', {})}
            />
          </>
        ) : (
          <ActionButton
            kind="reject"
            className="jp-TorchDbg-pause"
            label={trans.__('Pause')}
            disabled={!can.pause.enabled}
            title={
              can.pause.why ||
              trans.__('Hold the loop before the next optimizer step')
            }
            onClick={() => act('pause', {})}
          />
        )}
        {!truthful && (
          <>
            <ActionButton
              kind="reject"
              label={trans.__('LR ×0.5')}
              disabled={!can.scaleLr.enabled}
              title={
                can.scaleLr.why ||
                trans.__(
                  'Halve the learning rate of the optimizers from the next step'
                )
              }
              onClick={() => act('scale_lr', { factor: 0.5 })}
            />
            <ActionButton
              kind="reject"
              label={trans.__('Reset LR')}
              disabled={!can.resetLr.enabled}
              title={can.resetLr.why}
              onClick={() => act('reset_lr', {})}
            />
          </>
        )}
      </div>
      {truthful && (
        <LrEditor
          conn={conn}
          trans={trans}
          act={act}
          setNote={setNote}
          refresh={() => rerender(n => n + 1)}
        />
      )}
      {control.pending.length > 0 && (
        <div className="jp-TorchDbg-note">
          {trans.__(
            'Pending until the running cell ends (no kernel subshells): %1',
            control.pending.join(', ')
          )}
        </div>
      )}
      {state?.last_refusal && (
        <div className="jp-TorchDbg-note">{state.last_refusal}</div>
      )}
      {note && <div className="jp-TorchDbg-note">{note}</div>}
    </div>
  );
}
