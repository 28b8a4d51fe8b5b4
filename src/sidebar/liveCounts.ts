import type { TorchDbgModel } from '../model/model';
import type { SeriesRing } from '../model/ringbuffer';
import { NO_RUN } from '../panels/runs/model';
import type { IGradTrack } from '../protocol/messages';

/**
 * The live counters the Now strip, the status bar, the runs bar and the
 * section headers show, from every message that carries them (issue #22, item 1).
 *
 * The kernel sends a run's step count on three channels at three paces: the
 * gradient track's points in every `series` flush (x is the track's step, at
 * most 10 flushes a second; the auto stride keeps the time between two
 * sampled steps small), the `grads` status and the `runs` message (about
 * every 2 s while training) and `control` (only when something in it changes:
 * a pause, a clip, a new optimizer). Each is a count of the same run's step
 * boundaries that was true when it was sent, so none is ever ahead of the
 * kernel: the largest of them is the freshest, and never a guess.
 *
 * Alarms likewise: the alarms the panel holds for the run (sent at most twice
 * a second, the browser keeps the last 200 of a run) and the run's count in
 * `runs` (every alarm raised); the larger is the count.
 */

/**
 * The run the live counters are about: the current one, else the newest
 * (whichever run the user picked to look at).
 */
export function liveRun(model: TorchDbgModel): number {
  return model.runs.latest;
}

/** The series of `run` (with those recorded outside any run when it is the shown run). */
export function seriesOf(
  model: TorchDbgModel,
  run: number
): ReadonlyMap<string, SeriesRing> {
  return run === model.runs.shown ? model.series : model.seriesOfRun(run);
}

/** The gradient tracks of `run`: the kernel's latest status of each. */
export function tracksOf(model: TorchDbgModel, run: number): IGradTrack[] {
  const kept = model.grads.tracksOf(run);
  if (kept.length) {
    return kept;
  }
  // a kernel without runs: its tracks carry no run
  return run === model.grads.shownRun
    ? [...(model.grads.status?.tracks ?? [])]
    : [];
}

/**
 * Step boundaries taken in `run` as the newest message says (null: nothing
 * says yet). See the module comment for the sources.
 */
export function runStep(model: TorchDbgModel, run: number): number | null {
  let best: number | null = null;
  const take = (n: number | null | undefined) => {
    if (typeof n === 'number' && Number.isFinite(n) && n > 0) {
      best = best === null ? n : Math.max(best, n);
    }
  };
  const c = model.control.state;
  // control's `step` counts the run of its last step boundary while its `run`
  // names the kernel's last run: the same run only while the loop steps (not
  // idle). A kernel without runs sends no `run`; before the kernel's first
  // `runs` message the panel knows no run (NO_RUN).
  if (
    c &&
    (c.run === null ||
      c.run === undefined ||
      run === NO_RUN ||
      (c.run === run && c.idle !== true))
  ) {
    take(c.step);
  }
  take(model.runs.info(run)?.steps);
  const series = seriesOf(model, run);
  for (const track of tracksOf(model, run)) {
    if (track.state === 'disabled') {
      continue;
    }
    take(track.step);
    const ring = series.get(track.total_series);
    if (ring && ring.length) {
      take(ring.lastX);
    }
  }
  return best;
}

/** Alarms raised in `run` (the larger of the held list and the kernel's count). */
export function runAlarms(model: TorchDbgModel, run: number): number {
  return Math.max(
    model.grads.alertsOf(run).length,
    model.runs.info(run)?.alerts ?? 0
  );
}

/**
 * The alarms of the torch.distributed job while it runs (0 otherwise): they
 * count wherever the panel counts alarms "now" (the Now strip, the status bar).
 */
export function jobAlarms(model: TorchDbgModel): number {
  const job = model.ranks.job;
  return job && job.state === 'running' ? model.ranks.alarms.length : 0;
}
