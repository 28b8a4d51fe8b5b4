import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { useLiveTick } from '../../charts/live';
import { TorchDbgModel } from '../../model/model';
import type { IRunInfo } from '../../protocol/generated';
import { runAlarms, runStep } from '../../sidebar/liveCounts';
import { useSignalRender } from '../../ui/useSignalRender';
import { MAX_RUNS, NO_RUN } from './model';

/** "Run 3 · In[7] · 240 steps": one run in a line short enough for 250 px. */
export function runLabel(
  id: number,
  info: IRunInfo | undefined,
  trans: TranslationBundle
): string {
  const parts = [trans.__('Run %1', String(id))];
  if (info?.execution_count !== null && info?.execution_count !== undefined) {
    parts.push(trans.__('In[%1]', String(info.execution_count)));
  }
  if (info && info.steps === 0 && info.optimizers.length === 0) {
    // A loop that only calls log(): it has points but no step boundaries.
    parts.push(trans.__('log() only'));
  } else if (info) {
    parts.push(trans._n('%1 step', '%1 steps', info.steps));
  }
  return parts.join(' · ');
}

/** "Run 3 · In[7] · 240 steps · 2 alarms": the label with its alarms (a title). */
export function runTitle(
  id: number,
  info: IRunInfo | undefined,
  alarms: number,
  trans: TranslationBundle
): string {
  const label = runLabel(id, info, trans);
  if (alarms <= 0) {
    return label;
  }
  const count =
    alarms === 1 ? trans.__('1 alarm') : trans.__('%1 alarms', String(alarms));
  return `${label} · ${count}`;
}

/**
 * The runs the picker offers, newest first: the current one and the last
 * runs whose points the browser holds (at most MAX_RUNS).
 */
export function pickableRuns(model: TorchDbgModel): number[] {
  const runs = model.runs;
  const ids = new Set<number>(runs.stored.filter(id => id !== NO_RUN));
  if (runs.current !== null) {
    ids.add(runs.current);
  }
  for (const info of runs.runs.slice(-MAX_RUNS)) {
    ids.add(info.id);
  }
  return [...ids].sort((a, b) => b - a).slice(0, MAX_RUNS);
}

/**
 * The kernel's record of run `id` with its counts as fresh as the stream makes
 * them (`liveCounts.ts`): while the run trains, its steps follow every flush,
 * not only the `runs` message of every 2 s.
 */
export function liveRunInfo(
  model: TorchDbgModel,
  id: number
): IRunInfo | undefined {
  const info = model.runs.info(id);
  if (!info) {
    return undefined;
  }
  const steps = Math.max(info.steps, runStep(model, id) ?? 0);
  const alerts = runAlarms(model, id);
  return steps === info.steps && alerts === info.alerts
    ? info
    : { ...info, steps, alerts };
}

/**
 * The run picker: which run the panel shows (the current one by default),
 * earlier runs faded behind it, or one earlier run to compare with. Nothing
 * before the first run (or from a kernel without runs).
 */
export function RunsBar(props: {
  model: TorchDbgModel;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { model, trans } = props;
  const runs = model.runs;
  useSignalRender(runs.changed);
  useSignalRender(model.grads.changed);
  useSignalRender(model.control.changed);
  // the current run's step count follows the stream
  useLiveTick(runs.current !== null ? model.dataChanged : null);
  // re-render in the same event as a choice (the signal's re-render waits for
  // the next frame; a controlled input would snap back until then)
  const [, rerender] = useState(0);
  const chosen = () => rerender(n => n + 1);
  const ids = pickableRuns(model);
  if (ids.length === 0) {
    return null;
  }
  const shown = runs.shown;
  const alarms = (id: number) => runAlarms(model, id);
  const label = (id: number) => runLabel(id, liveRunInfo(model, id), trans);
  const title = (id: number) =>
    id === current
      ? trans.__(
          '%1 (running)',
          runTitle(id, liveRunInfo(model, id), alarms(id), trans)
        )
      : runTitle(id, liveRunInfo(model, id), alarms(id), trans);
  const others = ids.filter(id => id !== shown);
  const current = runs.current;
  return (
    <div
      className="jp-TorchDbg-runs"
      data-shown={shown}
      data-current={current ?? ''}
    >
      <div className="jp-TorchDbg-runsLine">
        <span
          className={`jp-TorchDbg-runDot${
            current !== null && shown === current ? ' jp-mod-running' : ''
          }`}
          title={
            current === null
              ? trans.__('Idle: no run is training')
              : shown === current
                ? trans.__('This run is training')
                : trans.__(
                    'An earlier run; run %1 is training',
                    String(current)
                  )
          }
        />
        <select
          className="jp-TorchDbg-runPick"
          aria-label={trans.__('Run shown')}
          title={title(shown)}
          value={String(shown)}
          onChange={e => {
            runs.pick(Number(e.currentTarget.value));
            chosen();
          }}
        >
          {ids.map(id => (
            <option key={id} value={String(id)} title={title(id)}>
              {label(id)}
            </option>
          ))}
        </select>
      </div>
      {others.length > 0 && (
        <div className="jp-TorchDbg-runsLine">
          <label
            className="jp-TorchDbg-runsFaded"
            title={trans.__('Draw the earlier runs faded behind the shown one')}
          >
            <input
              type="checkbox"
              checked={runs.faded}
              onChange={e => {
                runs.faded = e.currentTarget.checked;
                chosen();
              }}
            />{' '}
            {trans.__('earlier runs faded')}
          </label>
          <select
            className="jp-TorchDbg-runCompare"
            aria-label={trans.__('Compare with')}
            value={runs.compare === null ? '' : String(runs.compare)}
            onChange={e => {
              const v = e.currentTarget.value;
              runs.compare = v === '' ? null : Number(v);
              chosen();
            }}
          >
            <option value="">{trans.__('compare…')}</option>
            {others.map(id => (
              <option key={id} value={String(id)}>
                {trans.__('Run %1', String(id))}
              </option>
            ))}
          </select>
        </div>
      )}
    </div>
  );
}
