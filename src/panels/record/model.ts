import { ISignal, Signal } from '@lumino/signaling';

import type { IOverlay } from '../../charts/lineChart';
import type {
  IRecord,
  IRecordKernel,
  IRecordRunData
} from '../../protocol/generated';

/** A recorded run's key: `<kernel id>:<run id>`. */
export function recordKey(kernel: string, run: number): string {
  return `${kernel}:${run}`;
}

/** `FiniteOrSpecial` as a number: "NaN"/"Infinity" travel as strings. */
export function specialNumber(v: number | string): number {
  if (typeof v === 'number') {
    return v;
  }
  return v === 'Infinity' ? Infinity : v === '-Infinity' ? -Infinity : NaN;
}

/** A recorded series as chart arrays. */
export interface IRecordedSeries {
  name: string;
  x: Float64Array;
  y: Float64Array;
}

/** One opened recorded run: its data as the charts and the CSV export read it. */
export interface IOpenedRun {
  key: string;
  data: IRecordRunData;
  series: Map<string, IRecordedSeries>;
}

/**
 * The run store's record of this notebook's earlier kernels (`record`) and the
 * recorded runs the user opened (`record_run`). Kept across a kernel's death:
 * the next kernel of the notebook sends its record again.
 */
export class RecordModel {
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get record(): IRecord | null {
    return this._record;
  }

  /** The earlier kernels not dismissed whose end is worth a banner (not a clean shutdown). */
  get banners(): IRecordKernel[] {
    return (this._record?.kernels ?? []).filter(
      k => !k.dismissed && k.end.kind !== 'shutdown' && k.end.kind !== 'running'
    );
  }

  /** Every earlier kernel with at least one run (the "earlier runs" list). */
  get withRuns(): IRecordKernel[] {
    return (this._record?.kernels ?? []).filter(k => k.runs.length > 0);
  }

  get opened(): ReadonlyMap<string, IOpenedRun> {
    return this._opened;
  }

  /** The opened recorded run shown, or null. */
  get shown(): string | null {
    return this._shown;
  }

  set shown(key: string | null) {
    if (key !== this._shown) {
      this._shown = key;
      this._changed.emit();
    }
  }

  /** The recorded run drawn behind the live charts for comparison, or null. */
  get compare(): string | null {
    return this._compare;
  }

  set compare(key: string | null) {
    if (key !== this._compare) {
      this._compare = key;
      this._changed.emit();
    }
  }

  apply(msg: IRecord): void {
    this._record = msg;
    const known = new Set(msg.kernels.map(k => k.id));
    for (const key of [...this._opened.keys()]) {
      if (!known.has(key.split(':')[0])) {
        this._opened.delete(key);
      }
    }
    if (this._shown && !this._opened.has(this._shown)) {
      this._shown = null;
    }
    if (this._compare && !this._opened.has(this._compare)) {
      this._compare = null;
    }
    this._changed.emit();
  }

  applyRun(msg: IRecordRunData): void {
    const series = new Map<string, IRecordedSeries>();
    for (const s of msg.series) {
      series.set(s.name, {
        name: s.name,
        x: Float64Array.from(s.x),
        y: Float64Array.from(s.y, specialNumber)
      });
    }
    const key = recordKey(msg.kernel, msg.run);
    this._opened.set(key, { key, data: msg, series });
    this._shown = key;
    this._changed.emit();
  }

  /** The kernel a key names, from the record. */
  kernelOf(key: string): IRecordKernel | null {
    const id = key.split(':')[0];
    return this._record?.kernels.find(k => k.id === id) ?? null;
  }

  /**
   * The compared recorded run's `name` series as a chart overlay (step-indexed
   * series only: a memory timeline's x is clock time, which two kernels do not
   * share).
   */
  overlay(name: string): IOverlay | null {
    if (!this._compare || name.startsWith('mem/')) {
      return null;
    }
    const run = this._opened.get(this._compare);
    const s = run?.series.get(name);
    if (!run || !s || !s.x.length) {
      return null;
    }
    const ended = this.kernelOf(this._compare)?.end.kind;
    const who = ended === 'shutdown' ? 'earlier kernel' : 'died kernel';
    return {
      label: `${who} · run ${run.data.run}`,
      x: s.x,
      y: s.y,
      compare: true
    };
  }

  /** Forget everything (the panel closed or switched notebooks). */
  reset(): void {
    this._record = null;
    this._opened.clear();
    this._shown = null;
    this._compare = null;
    this._changed.emit();
  }

  private _record: IRecord | null = null;
  private _opened = new Map<string, IOpenedRun>();
  private _shown: string | null = null;
  private _compare: string | null = null;
  private _changed = new Signal<this, void>(this);
}
