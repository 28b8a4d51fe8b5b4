import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { ActionService, outcomeNote } from '../../connection/actions';
import { TorchDbgConnection } from '../../connection/connection';
import { TorchDbgModel } from '../../model/model';
import { IGradTrack } from '../../protocol/messages';
import { useLiveTick } from '../../charts/live';
import { useSignalRender } from '../../ui/useSignalRender';
import { gradsEmptyText } from './emptyText';
import { download, gradsCsv, gradsJson } from './export';
import { TrackView } from './trackView';

/** Whether non-finite steps are skipped: every monitored track says so. */
export function skipping(tracks: IGradTrack[] | undefined): boolean {
  const active = (tracks ?? []).filter(t => t.state !== 'disabled');
  return active.length > 0 && active.every(t => t.skip_nonfinite === true);
}

/** The gradient monitor: per-optimizer charts, alarms, layer table, controls. */
export function GradsPanel(props: {
  model: TorchDbgModel;
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element {
  const { model, conn, trans } = props;
  useSignalRender(model.grads.changed);
  const tick = useLiveTick(model.dataChanged);
  const status = model.grads.status;
  const [note, setNote] = useState('');
  const setStride = (value: string) => {
    const stride = value === 'auto' || value === 'off' ? value : Number(value);
    void ActionService.of(conn)
      .send('set_stride', { stride }, () =>
        setNote(trans.__('pending: applies when the cell ends'))
      )
      .then(outcome => setNote(outcomeNote(outcome)));
  };
  // The box shows the click at once; the kernel's status (sent before its ack) then
  // takes over, so a refusal puts it back.
  const [skipSent, setSkipSent] = useState<boolean | null>(null);
  const setSkip = (on: boolean) => {
    setSkipSent(on);
    void ActionService.of(conn)
      .send('skip_nonfinite', { on }, () =>
        setNote(trans.__('pending: applies when the cell ends'))
      )
      .then(outcome => setNote(outcomeNote(outcome)))
      .finally(() => setSkipSent(null));
  };
  if (!status) {
    return (
      <div className="jp-TorchDbg-empty">
        <p>
          {trans.__(
            'The gradient monitor starts at the first optimizer.step() once torch is imported.'
          )}
        </p>
      </div>
    );
  }
  const active = status.tracks.filter(t => t.state !== 'disabled');
  const strideValue =
    status.mode === 'auto'
      ? 'auto'
      : status.mode === 'off'
        ? 'off'
        : String(status.stride ?? 1);
  return (
    <div className="jp-TorchDbg-grads">
      <div className="jp-TorchDbg-controls">
        <label>
          {trans.__('sample')}{' '}
          <select
            className="jp-TorchDbg-stride"
            value={strideValue}
            onChange={e => setStride(e.currentTarget.value)}
          >
            <option value="auto">{trans.__('auto (≤1% overhead)')}</option>
            <option value="1">{trans.__('every step')}</option>
            <option value="10">{trans.__('every 10 steps')}</option>
            <option value="100">{trans.__('every 100 steps')}</option>
            <option value="off">{trans.__('off')}</option>
            {!['auto', 'off', '1', '10', '100'].includes(strideValue) && (
              <option value={strideValue}>
                {trans.__('every %1 steps', strideValue)}
              </option>
            )}
          </select>
        </label>
        <label
          title={trans.__(
            'Skip optimizer steps whose gradients are NaN/Inf: the weights and optimizer state stay finite. Every step is then checked (on CUDA one small sync per step).'
          )}
        >
          <input
            type="checkbox"
            className="jp-TorchDbg-skipNonfinite"
            checked={
              skipSent ?? status.skip_nonfinite ?? skipping(status.tracks)
            }
            onChange={e => setSkip(e.currentTarget.checked)}
          />{' '}
          {trans.__('skip non-finite steps')}
        </label>
        <span
          className="jp-TorchDbg-exports"
          title={trans.__('Download the gradient norms')}
        >
          <button
            className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
            onClick={() =>
              download('grad-norms.csv', gradsCsv(model), 'text/csv')
            }
          >
            CSV
          </button>
          <button
            className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
            onClick={() =>
              download('grad-norms.json', gradsJson(model), 'application/json')
            }
          >
            JSON
          </button>
        </span>
      </div>
      {note && <div className="jp-TorchDbg-note">{note}</div>}
      {status.reason && (
        <p className="jp-TorchDbg-stateText">{status.reason}</p>
      )}
      {active.length === 0 && (
        <p className="jp-TorchDbg-empty">{gradsEmptyText(model, trans)}</p>
      )}
      {active.map(track => (
        <TrackView
          key={track.name}
          model={model}
          conn={conn}
          track={track}
          tick={tick}
          trans={trans}
        />
      ))}
    </div>
  );
}
