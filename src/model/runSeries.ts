import { NO_RUN } from '../panels/runs/model';
import { SeriesRing } from './ringbuffer';

/** Points kept per series in the browser. */
export const SERIES_CAPACITY = 100_000;

/** A series of an earlier run, drawn faded behind the shown run's. */
export interface IRunSeries {
  run: number;
  ring: SeriesRing;
}

/**
 * The points the browser holds, by run and series name: run -> name ->
 * ring (NO_RUN: points recorded outside any run, e.g. memory). At most
 * `maxRuns` runs are held: the oldest is forgotten for a newer one, and
 * points of a run older than every held one are dropped.
 */
export class RunSeries {
  /**
   * `onHeld` is told the held runs (oldest first, without NO_RUN) whenever
   * a run is added or forgotten.
   */
  constructor(
    capacity: number,
    maxRuns: number,
    onHeld: (runs: number[]) => void
  ) {
    this._capacity = capacity;
    this._maxRuns = maxRuns;
    this._onHeld = onHeld;
    this._runs.set(NO_RUN, new Map());
  }

  /** Forget every run's points. */
  clear(): void {
    this._runs.clear();
    this._runs.set(NO_RUN, new Map());
    this._view = null;
  }

  /** The runs held (NO_RUN included), in the order first seen. */
  runIds(): number[] {
    return [...this._runs.keys()];
  }

  /** The series of one run by name (NO_RUN: recorded outside any run). */
  ofRun(run: number): ReadonlyMap<string, SeriesRing> {
    return this._runs.get(run) ?? new Map();
  }

  /**
   * The series of run `shown` by name, in first-seen order, followed by
   * those recorded outside any run that `shown` does not have. Kept until
   * `invalidateView` (or a new series or run).
   */
  view(shown: number): ReadonlyMap<string, SeriesRing> {
    if (!this._view) {
      const outside = this._runs.get(NO_RUN)!;
      const rings = this._runs.get(shown) ?? new Map();
      if (rings === outside || outside.size === 0) {
        this._view = rings;
      } else {
        this._view = new Map(rings);
        for (const [name, ring] of outside) {
          if (!rings.has(name)) {
            this._view.set(name, ring);
          }
        }
      }
    }
    return this._view;
  }

  /** Build the view again at the next `view` (the shown run changed). */
  invalidateView(): void {
    this._view = null;
  }

  /** The same series in every held run before `shown`, oldest first. */
  earlier(shown: number, name: string): IRunSeries[] {
    const out: IRunSeries[] = [];
    for (const run of [...this._runs.keys()].sort((a, b) => a - b)) {
      const ring = this._runs.get(run)!.get(name);
      if (run !== NO_RUN && run < shown && ring && ring.length) {
        out.push({ run, ring });
      }
    }
    return out;
  }

  /** Append a decoded block's points (`names[j]` with `ys[j]`) to `run`. */
  push(
    run: number,
    names: ReadonlyArray<string>,
    x: ArrayLike<number>,
    ys: ReadonlyArray<ArrayLike<number>>
  ): void {
    const rings = this._runRings(run);
    if (!rings) {
      return;
    }
    names.forEach((name, j) => {
      let ring = rings.get(name);
      if (!ring) {
        ring = new SeriesRing(this._capacity);
        rings.set(name, ring);
        this._view = null;
      }
      ring.push(x, ys[j]);
    });
  }

  /**
   * The rings of `run`, created if needed; the oldest run is forgotten when
   * more than `maxRuns` runs would be held. Undefined for a run older than
   * every held one once the browser holds `maxRuns` (its points are dropped).
   */
  private _runRings(run: number): Map<string, SeriesRing> | undefined {
    let rings = this._runs.get(run);
    if (rings) {
      return rings;
    }
    const held = [...this._runs.keys()]
      .filter(id => id !== NO_RUN)
      .sort((a, b) => a - b);
    if (run !== NO_RUN && held.length >= this._maxRuns) {
      if (run < held[0]) {
        return undefined;
      }
      for (const id of held.slice(0, held.length - this._maxRuns + 1)) {
        this._runs.delete(id);
      }
    }
    rings = new Map<string, SeriesRing>();
    this._runs.set(run, rings);
    this._view = null;
    this._onHeld(
      [...this._runs.keys()].filter(id => id !== NO_RUN).sort((a, b) => a - b)
    );
    return rings;
  }

  private _capacity: number;
  private _maxRuns: number;
  private _onHeld: (runs: number[]) => void;
  /** run -> name -> ring (NO_RUN: points recorded outside any run). */
  private _runs = new Map<number, Map<string, SeriesRing>>();
  private _view: Map<string, SeriesRing> | null = null;
}
