import { csvFloat32, csvNumber, csvText } from '../../model/csv';
import type { TorchDbgModel } from '../../model/model';
import { NO_RUN } from '../runs/model';

/**
 * The DOM event the Logged series' CSV button sends up to the sidebar, whose
 * plugin runs the "Export All Runs and Series as CSV" command (it saves
 * through the application's contents service, which the panel does not hold).
 */
export const EXPORT_ALL_EVENT = 'torchdbg-export-all';

/** The tidy table's one header row. */
export const TIDY_HEADER = 'run,series,step,value';

/**
 * Whether a series belongs in the tidy table: the logged series and the
 * gradient monitor's (`grad/…` norms, `param/…` weight norms), whose x is a
 * step. Memory timelines (`mem/…`) are indexed by time, not step: left out.
 */
export function isStepSeries(name: string): boolean {
  return !name.startsWith('mem/');
}

/** Whether `tidyCsv` would hold any row (what the Export command needs). */
export function hasTidyRows(model: TorchDbgModel): boolean {
  for (const run of model.knownRuns()) {
    for (const [name, ring] of model.seriesOfRun(run)) {
      if (ring.length > 0 && isStepSeries(name)) {
        return true;
      }
    }
  }
  return false;
}

/**
 * Every run the browser holds (the last five) and every series in it, logged
 * and monitored, as one tidy (long) CSV table with the columns
 * `run,series,step,value`: one row per point, runs oldest first, each run's
 * series in first-seen order. `pandas.read_csv(path)` reads it as it is
 * (`df.pivot_table(index=["run", "step"], columns="series", values="value")`
 * gives one column per series). Gradient norms are the series
 * `grad/<optimizer>/total` and `grad/<optimizer>/<layer>`, weight norms
 * `param/<optimizer>/<layer>`; other names are what `log()` was given. `run`
 * is blank for points outside any run (a kernel before protocol 2.3); NaN and
 * ±Inf are written `nan`, `inf`, `-inf`; values are float32, as streamed.
 */
export function tidyCsv(model: TorchDbgModel): string {
  const lines: string[] = [TIDY_HEADER];
  for (const run of model.knownRuns()) {
    const r = run === NO_RUN ? '' : String(run);
    for (const [name, ring] of model.seriesOfRun(run)) {
      if (!isStepSeries(name)) {
        continue;
      }
      const series = csvText(name);
      const { x, y } = ring.toArrays();
      for (let i = 0; i < x.length; i++) {
        lines.push(`${r},${series},${csvNumber(x[i])},${csvFloat32(y[i])}`);
      }
    }
  }
  return lines.join('\n') + '\n';
}
