import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { ActionService, outcomeNote } from '../../connection/actions';
import type { TorchDbgConnection } from '../../connection/connection';
import type { ActionName, IActionArgs } from '../../protocol/messages';
import type { IRecordKernel, IRecordRun } from '../../protocol/generated';
import { RichText } from '../../ui/richText';
import { useSignalRender } from '../../ui/useSignalRender';
import { chartSeries, RecordChart } from './charts';
import { IOpenedRun, recordKey } from './model';

/** A Unix time as the user's local date and time. */
function when(t: number): string {
  return new Date(t * 1000).toLocaleString();
}

/**
 * What the run store kept of this notebook's earlier kernels: a banner for each
 * kernel that died (why and where, kept until dismissed, after a reload too),
 * its runs to reopen, and the reopened run's charts and alarms, which can be
 * drawn behind the new runs' charts. Nothing when there is no record.
 */
export function RecordPanel(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { conn, trans } = props;
  const rec = conn.model.record;
  useSignalRender(rec.changed);
  const [note, setNote] = useState('');
  const record = rec.record;
  if (!record) {
    return null;
  }
  const banners = rec.banners;
  const earlier = rec.withRuns;
  if (!banners.length && !earlier.length && !record.note) {
    return null;
  }
  const send = <K extends ActionName>(action: K, args: IActionArgs[K]) => {
    void ActionService.of(conn)
      .send(action, args)
      .then(outcome => setNote(outcomeNote(outcome)));
  };
  const open = (k: IRecordKernel, run: IRecordRun) => {
    const key = recordKey(k.id, run.id);
    if (rec.opened.has(key)) {
      rec.shown = rec.shown === key ? null : key;
      return;
    }
    send('open_record', { kernel: k.id, run: run.id });
  };
  const shown = rec.shown ? rec.opened.get(rec.shown) : undefined;
  const runButtons = (k: IRecordKernel) => (
    <div className="jp-TorchDbg-recordRuns">
      {k.runs.map(r => {
        const key = recordKey(k.id, r.id);
        return (
          <button
            key={r.id}
            className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
            aria-pressed={rec.shown === key}
            data-run={r.id}
            title={trans.__('Show this run (recorded %1)', when(r.start))}
            onClick={() => open(k, r)}
          >
            {trans._n(
              'run %2 · %1 step',
              'run %2 · %1 steps',
              r.steps,
              String(r.id)
            ) +
              (r.alerts
                ? ` · ${trans._n('%1 alarm', '%1 alarms', r.alerts)}`
                : '')}
          </button>
        );
      })}
    </div>
  );
  const bannerIds = new Set(banners.map(k => k.id));
  const others = earlier.filter(k => !bannerIds.has(k.id));
  return (
    <div className="jp-TorchDbg-record">
      {record.note && <p className="jp-TorchDbg-muted">{record.note}</p>}
      {banners.map(k => (
        <div
          key={k.id}
          className="jp-TorchDbg-recordBanner"
          data-kernel={k.id}
          data-end={k.end.kind}
          role="status"
        >
          <div className="jp-TorchDbg-excTitle">
            {k.end.kind === 'unknown'
              ? trans.__('The previous kernel of this notebook stopped')
              : k.end.kind === 'exit'
                ? trans.__('The previous kernel of this notebook exited')
                : trans.__('The previous kernel of this notebook died')}
          </div>
          <p className="jp-TorchDbg-headline">
            <RichText text={k.text} />
          </p>
          {k.exception && (
            <p className="jp-TorchDbg-recordExc">
              {trans.__('Last exception: ')}
              <code>{`${k.exception.ename}: ${k.exception.evalue}`}</code>
            </p>
          )}
          {k.runs.length > 0 && runButtons(k)}
          <div className="jp-TorchDbg-controls">
            <button
              className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small jp-TorchDbg-recordDismiss"
              onClick={() => send('dismiss_record', { kernel: k.id })}
            >
              {trans.__('Dismiss')}
            </button>
          </div>
        </div>
      ))}
      {others.length > 0 && (
        <details className="jp-TorchDbg-recordEarlier">
          <summary>
            {trans._n(
              'Earlier kernel of this notebook (%1)',
              'Earlier kernels of this notebook (%1)',
              others.length
            )}
          </summary>
          {others.map(k => (
            <div
              key={k.id}
              className="jp-TorchDbg-recordKernel"
              data-kernel={k.id}
            >
              <div className="jp-TorchDbg-muted">
                <RichText text={k.text} />
              </div>
              {runButtons(k)}
            </div>
          ))}
        </details>
      )}
      {note && <div className="jp-TorchDbg-note">{note}</div>}
      {shown && (
        <RecordRunView run={shown} conn={conn} trans={trans} onNote={setNote} />
      )}
    </div>
  );
}

/** A reopened recorded run: its charts, alarms, and the compare / export buttons. */
function RecordRunView(props: {
  run: IOpenedRun;
  conn: TorchDbgConnection;
  trans: TranslationBundle;
  onNote: (text: string) => void;
}): JSX.Element {
  const { run, conn, trans, onNote } = props;
  const rec = conn.model.record;
  const charts = chartSeries(run);
  const comparing = rec.compare === run.key;
  const tensorboard = conn.model.hello?.capabilities.tensorboard;
  const alerts = run.data.alerts;
  return (
    <div
      className="jp-TorchDbg-recordRun"
      data-kernel={run.data.kernel}
      data-run={run.data.run}
    >
      <div className="jp-TorchDbg-chartTitle">
        {trans._n(
          'Recorded run %2: %1 step',
          'Recorded run %2: %1 steps',
          run.data.info.steps,
          String(run.data.run)
        )}
      </div>
      {charts.length === 0 && (
        <p className="jp-TorchDbg-muted">
          {trans.__('Nothing was logged or monitored in this run.')}
        </p>
      )}
      {charts.map(s => (
        <RecordChart key={s.name} series={s} trans={trans} />
      ))}
      {alerts.length > 0 && (
        <ul className="jp-TorchDbg-recordAlerts">
          {alerts.slice(-8).map(a => (
            <li key={a.id} data-kind={a.kind}>
              <strong>{trans.__('step %1', String(a.step))}</strong>{' '}
              <RichText text={a.message} />
            </li>
          ))}
        </ul>
      )}
      <div className="jp-TorchDbg-controls">
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small jp-TorchDbg-recordCompare"
          aria-pressed={comparing}
          title={trans.__(
            "Draw this run behind the new runs' charts (logged series and gradients)"
          )}
          onClick={() => (rec.compare = comparing ? null : run.key)}
        >
          {comparing ? trans.__('Stop comparing') : trans.__('Compare')}
        </button>
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small jp-TorchDbg-recordTensorboard"
          disabled={!tensorboard?.available}
          title={
            tensorboard?.available
              ? trans.__('Write this run as TensorBoard event files')
              : (tensorboard?.reason ??
                trans.__('tensorboard is not installed'))
          }
          onClick={() =>
            void ActionService.of(conn)
              .send('export_tensorboard', {
                run: run.data.run,
                kernel: run.data.kernel
              })
              .then(outcome =>
                onNote(
                  outcomeNote(outcome, r =>
                    trans.__('TensorBoard files written to %1', r.path)
                  )
                )
              )
          }
        >
          {trans.__('TensorBoard')}
        </button>
      </div>
    </div>
  );
}
