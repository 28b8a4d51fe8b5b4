import { ISignal, Signal } from '@lumino/signaling';

import type { IRunInfo, IRuns } from '../../protocol/generated';

/** Runs whose points the browser keeps (older runs' points are forgotten). */
export const MAX_RUNS = 5;

/** The run id of points recorded outside any run (or by a kernel without runs). */
export const NO_RUN = 0;

/**
 * The runs as the kernel reports them (`runs` message) and which one the panel
 * shows: the current run unless the user picked another, plus which earlier
 * runs are drawn faded behind it. Pure data with a signal; no DOM.
 */
export class RunsModel {
  /** Emitted when the kernel's runs or the user's choices change. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The running run's id, or null when idle (or before any run). */
  get current(): number | null {
    return this._current;
  }

  /** The kernel's last runs, oldest first. */
  get runs(): readonly IRunInfo[] {
    return this._runs;
  }

  /** Run ids (≥ 1) whose points the browser holds, ascending (set by the kernel model). */
  get stored(): readonly number[] {
    return this._stored;
  }

  /** The run the user picked, or null to follow the current run. */
  get picked(): number | null {
    return this._picked;
  }

  /** Whether earlier runs are drawn faded behind the shown one. */
  get faded(): boolean {
    return this._faded;
  }

  set faded(value: boolean) {
    if (value !== this._faded) {
      this._faded = value;
      this._changed.emit();
    }
  }

  /** One earlier run the user picked to compare with, or null. */
  get compare(): number | null {
    return this._compare;
  }

  set compare(id: number | null) {
    if (id !== this._compare) {
      this._compare = id;
      this._changed.emit();
    }
  }

  /**
   * The run whose series, tracks and alarms the panel shows: the picked one,
   * else the current one, else the newest run the kernel or the browser knows
   * (NO_RUN when there is none: a kernel without runs).
   */
  get shown(): number {
    if (this._picked !== null && this._known(this._picked)) {
      return this._picked;
    }
    return this.latest;
  }

  /**
   * The current run, else the newest run the kernel or the browser knows
   * (NO_RUN when there is none): what "now" is about, whichever run is shown.
   */
  get latest(): number {
    if (this._current !== null) {
      return this._current;
    }
    const newestKernel = this._runs.length
      ? this._runs[this._runs.length - 1].id
      : NO_RUN;
    const newestStored = this._stored.length
      ? this._stored[this._stored.length - 1]
      : NO_RUN;
    return Math.max(newestKernel, newestStored);
  }

  /** The kernel's record of a run, if it still lists it. */
  info(id: number): IRunInfo | undefined {
    return this._runs.find(r => r.id === id);
  }

  /**
   * Runs drawn faded behind the shown one, oldest first: every earlier run
   * held in the browser when `faded` is on, and the `compare` run.
   */
  overlayRuns(): number[] {
    const shown = this.shown;
    const out = new Set<number>();
    if (this._faded) {
      for (const id of this._stored) {
        if (id !== NO_RUN && id < shown) {
          out.add(id);
        }
      }
    }
    if (
      this._compare !== null &&
      this._compare !== shown &&
      this._stored.includes(this._compare)
    ) {
      out.add(this._compare);
    }
    return [...out].sort((a, b) => a - b);
  }

  /** Apply a `runs` message. */
  apply(msg: IRuns): void {
    this._current = msg.current;
    this._runs = msg.runs.slice();
    this._changed.emit();
  }

  /** Show `id` (null, or the current run's id: follow the current run). */
  pick(id: number | null): void {
    const next = id === this._current ? null : id;
    if (next === this._picked) {
      return;
    }
    this._picked = next;
    this._changed.emit();
  }

  /** The kernel model reports which runs hold points (ascending ids). */
  setStored(ids: readonly number[]): void {
    const same =
      ids.length === this._stored.length &&
      ids.every((id, i) => id === this._stored[i]);
    if (same) {
      return;
    }
    this._stored = ids.slice();
    // a run older than every held one was forgotten: stop showing or comparing it
    const oldest = ids.find(id => id !== NO_RUN);
    const gone = (id: number | null) =>
      id !== null && oldest !== undefined && id < oldest;
    if (gone(this._picked)) {
      this._picked = null;
    }
    if (
      gone(this._compare) ||
      (this._compare !== null && !this._known(this._compare))
    ) {
      this._compare = null;
    }
    this._changed.emit();
  }

  /** Forget everything (kernel restarted or changed); the toggle stays. */
  reset(): void {
    this._current = null;
    this._runs = [];
    this._stored = [];
    this._picked = null;
    this._compare = null;
    this._changed.emit();
  }

  private _known(id: number): boolean {
    return this._stored.includes(id) || this._runs.some(r => r.id === id);
  }

  private _current: number | null = null;
  private _runs: IRunInfo[] = [];
  private _stored: number[] = [];
  private _picked: number | null = null;
  private _faded = false;
  private _compare: number | null = null;
  private _changed = new Signal<this, void>(this);
}
