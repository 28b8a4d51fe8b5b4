import { csvFloat32, csvNumber, csvText } from '../../model/csv';
import type { TorchDbgModel } from '../../model/model';
import type { IAlertItem } from '../../protocol/messages';
import { NO_RUN } from '../runs/model';

/**
 * The DOM event the Logged series' CSV button sends up to the sidebar, whose
 * plugin runs the "Export All Runs and Series as CSV" command (it saves
 * through the application's contents service, which the panel does not hold).
 */
export const EXPORT_ALL_EVENT = 'torchdbg-export-all';

/** The tidy table's one header row. */
export const TIDY_HEADER = 'kernel,run,series,step,time,value,text';

/**
 * Whether a series' x is a step: the logged series and the gradient
 * monitor's (`grad/…` norms, `param/…` weight norms). Memory timelines
 * (`mem/…`) are indexed by Unix time instead (the `time` column).
 */
export function isStepSeries(name: string): boolean {
  return !name.startsWith('mem/');
}

/** Whether `tidyCsv` would hold any row (what the Export command needs). */
export function hasTidyRows(model: TorchDbgModel): boolean {
  for (const run of model.knownRuns()) {
    for (const ring of model.seriesOfRun(run).values()) {
      if (ring.length > 0) {
        return true;
      }
    }
  }
  return model.grads.allAlerts.length > 0 || model.record.opened.size > 0;
}

/** One point's row: a step series fills `step`, a memory timeline `time`. */
function pointRow(
  kernel: string,
  run: string,
  name: string,
  x: number,
  y: number
): string {
  const step = isStepSeries(name) ? csvNumber(x) : '';
  const time = isStepSeries(name) ? '' : csvNumber(x);
  return `${kernel},${run},${csvText(name)},${step},${time},${csvFloat32(y)},`;
}

/** An alarm's row: series `alarm/<kind>`, its step, time, value and message. */
function alarmRow(kernel: string, a: IAlertItem): string {
  const run = a.run === null || a.run === undefined ? '' : String(a.run);
  const value = typeof a.value === 'number' ? csvNumber(a.value) : '';
  return (
    `${kernel},${run},${csvText(`alarm/${a.kind}`)},${csvNumber(a.step)},` +
    `${csvNumber(a.time)},${value},${csvText(a.message)}`
  );
}

/**
 * Everything the panel holds as one tidy (long) CSV table with the columns
 * `kernel,run,series,step,time,value,text`, one row per point or alarm:
 *
 * - this kernel's runs (`kernel` blank; the last five runs the browser holds),
 *   oldest first, each run's series in first-seen order: the logged series
 *   and the gradient norms (`grad/<optimizer>/total`, `grad/<optimizer>/<layer>`,
 *   weight norms `param/<optimizer>/<layer>`) with their `step`; the memory
 *   timelines (`mem/<device>/<counter>`, bytes) with their Unix `time`;
 * - the alarms, as series `alarm/<kind>` with step, time, value and the
 *   message in `text`;
 * - every recorded run of an earlier kernel the user reopened (`kernel` is
 *   its record id), its series and alarms the same way.
 *
 * `pandas.read_csv(path)` reads it as it is
 * (`df[df.step.notna()].pivot_table(index=["kernel", "run", "step"],
 * columns="series", values="value")` gives one column per step series).
 * `run` is blank for points outside any run (a kernel before protocol 2.3);
 * NaN and ±Inf are written `nan`, `inf`, `-inf`; values are float32, as
 * streamed.
 */
export function tidyCsv(model: TorchDbgModel): string {
  const lines: string[] = [TIDY_HEADER];
  for (const run of model.knownRuns()) {
    const r = run === NO_RUN ? '' : String(run);
    for (const [name, ring] of model.seriesOfRun(run)) {
      const { x, y } = ring.toArrays();
      for (let i = 0; i < x.length; i++) {
        lines.push(pointRow('', r, name, x[i], y[i]));
      }
    }
  }
  for (const a of model.grads.allAlerts) {
    lines.push(alarmRow('', a));
  }
  for (const opened of model.record.opened.values()) {
    const kernel = opened.data.kernel;
    const r = String(opened.data.run);
    for (const s of opened.series.values()) {
      for (let i = 0; i < s.x.length; i++) {
        lines.push(pointRow(kernel, r, s.name, s.x[i], s.y[i]));
      }
    }
    for (const a of opened.data.alerts) {
      lines.push(alarmRow(kernel, a));
    }
  }
  return lines.join('\n') + '\n';
}
