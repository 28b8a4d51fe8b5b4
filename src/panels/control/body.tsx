import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { TorchDbgConnection } from '../../connection/connection';
import { ActionName, IActionArgs } from '../../protocol/messages';
import { useSignalRender } from '../../ui/useSignalRender';
import { sendControl } from './sendControl';

/** Clip, pause / resume / single step and LR scaling of the running loop. */
export function ControlPanel(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element {
  const { conn, trans } = props;
  const control = conn.model.control;
  useSignalRender(control.changed);
  const [maxNorm, setMaxNorm] = useState('1.0');
  const [note, setNote] = useState('');
  const state = control.state;
  const live = conn.model.hello?.capabilities.subshells ?? false;
  const act = <K extends ActionName>(action: K, args: IActionArgs[K]) => {
    setNote('');
    void sendControl(conn, action, args).then(setNote);
  };
  const clipValue = Number(maxNorm);
  const clipValid = Number.isFinite(clipValue) && clipValue > 0;
  return (
    <div className="jp-TorchDbg-control">
      <div
        className="jp-TorchDbg-controlState"
        data-paused={state?.paused ? 'true' : 'false'}
      >
        {state?.paused
          ? trans.__(
              'Paused before optimizer step %1.',
              String(state.paused_at ?? state.step)
            )
          : trans.__('Running. Controls apply at the next optimizer.step().')}
        {state?.clip !== null && state?.clip !== undefined && (
          <span className="jp-TorchDbg-chip jp-mod-ok">
            {trans.__('clip %1', String(state.clip))}
          </span>
        )}
        {state?.lr_scale !== null && state?.lr_scale !== undefined && (
          <span className="jp-TorchDbg-chip jp-mod-ok">
            {trans.__('LR ×%1', String(state.lr_scale))}
          </span>
        )}
      </div>
      <div className="jp-TorchDbg-controls">
        <label className="jp-TorchDbg-clipLabel">
          {trans.__('max norm')}{' '}
          <input
            className="jp-TorchDbg-clipInput"
            type="number"
            min="0"
            step="0.1"
            value={maxNorm}
            aria-invalid={!clipValid}
            onChange={e => setMaxNorm(e.currentTarget.value)}
          />
        </label>
        <button
          className="jp-Button jp-mod-styled jp-mod-accept jp-TorchDbg-small"
          disabled={!clipValid}
          onClick={() => act('clip', { max_norm: clipValue })}
        >
          {trans.__('Clip')}
        </button>
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          disabled={state?.clip === null || state?.clip === undefined}
          onClick={() => act('unclip', {})}
        >
          {trans.__('Stop clipping')}
        </button>
      </div>
      <div className="jp-TorchDbg-controls">
        {state?.paused ? (
          <>
            <button
              className="jp-Button jp-mod-styled jp-mod-accept jp-TorchDbg-small"
              onClick={() => act('resume', {})}
            >
              {trans.__('Resume')}
            </button>
            <button
              className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
              onClick={() => act('step', {})}
            >
              {trans.__('Step')}
            </button>
          </>
        ) : (
          <button
            className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
            disabled={!live}
            title={
              live
                ? trans.__('Hold the loop before the next optimizer step')
                : trans.__('Pausing needs kernel subshells (ipykernel ≥ 7)')
            }
            onClick={() => act('pause', {})}
          >
            {trans.__('Pause')}
          </button>
        )}
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          onClick={() => act('scale_lr', { factor: 0.5 })}
          title={trans.__(
            'Halve the learning rate of the optimizers from the next step'
          )}
        >
          {trans.__('LR ×0.5')}
        </button>
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          disabled={state?.lr_scale === null || state?.lr_scale === undefined}
          onClick={() => act('reset_lr', {})}
        >
          {trans.__('Reset LR')}
        </button>
      </div>
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
