import { ISignal, Signal } from '@lumino/signaling';

import { ControlModel } from '../panels/control/model';
import { ExceptionModel } from '../panels/exception/model';
import { MemoryModel } from '../panels/memory/model';
import type { IOverlay } from '../charts/lineChart';
import { GradsModel } from '../panels/grads/model';
import { RanksModel } from '../panels/ranks/model';
import { RecordModel } from '../panels/record/model';
import { MAX_RUNS, NO_RUN, RunsModel } from '../panels/runs/model';
import { decodeBlocks, IDecoded, NameTable } from '../protocol/codec';
import type { IRuns } from '../protocol/generated';
import {
  IBlock,
  IHello,
  ISeries,
  ISnapshot,
  IStreamStats
} from '../protocol/messages';
import { SeriesRing } from './ringbuffer';

/**
 * Why the panel shows what it shows. Every state other than `connected` is
 * rendered as a sentence that says why there is no data (never a blank panel).
 */
export type ConnectionState =
  | { kind: 'no_kernel' }
  | { kind: 'not_python'; language: string }
  | { kind: 'connecting' }
  | { kind: 'busy_waiting' }
  | { kind: 'loading' }
  | { kind: 'not_loaded'; reason: string }
  | { kind: 'package_missing'; detail: string }
  | { kind: 'version_mismatch'; message: string }
  | { kind: 'restarting' }
  | { kind: 'dead' }
  | { kind: 'connected' };

/** Points kept per series in the browser. */
export const SERIES_CAPACITY = 100_000;

/** A series of an earlier run, drawn faded behind the shown run's. */
export interface IRunSeries {
  run: number;
  ring: SeriesRing;
}

/**
 * The state of one kernel as the panel knows it: connection state, the kernel's
 * hello, and the streamed series. Pure data with signals; no DOM.
 */
export class TorchDbgModel {
  constructor(options: TorchDbgModel.IOptions = {}) {
    this._capacity = options.capacity ?? SERIES_CAPACITY;
    this._maxRuns = options.maxRuns ?? MAX_RUNS;
    this._runs.set(NO_RUN, new Map());
    this.runs.changed.connect(this._onRunsChanged, this);
  }

  /** The runs, and which one the panel shows (see `series`). */
  readonly runs = new RunsModel();

  /** The gradient monitor's status and alarms. */
  readonly grads = new GradsModel();

  /** The last unhandled exception. */
  readonly exception = new ExceptionModel();

  /** Clip / pause / LR state of the training loop. */
  readonly control = new ControlModel();

  /** CUDA / host memory status and the last OOM autopsy. */
  readonly memory = new MemoryModel();

  /**
   * The run store's record of the notebook's earlier kernels (protocol 2.6).
   * Not cleared by `reset`: it is what the panel still shows of a kernel that
   * died, until the next kernel's `record` replaces it.
   */
  readonly record = new RecordModel();

  /**
   * When (Unix seconds) the kernel died, while the panel still shows what it
   * last sent (read only); null otherwise. Cleared when the next kernel
   * connects (`reset`).
   */
  died: number | null = null;

  /** The ranks of a torch.distributed job streaming to this kernel (protocol 2.4). */
  readonly ranks = new RanksModel();

  /** Emitted when the connection state or hello changes. */
  get stateChanged(): ISignal<this, ConnectionState> {
    return this._stateChanged;
  }

  /** Emitted after new points arrived (at most once per kernel message). */
  get dataChanged(): ISignal<this, void> {
    return this._dataChanged;
  }

  get state(): ConnectionState {
    return this._state;
  }

  set state(value: ConnectionState) {
    this._state = value;
    this._stateChanged.emit(value);
  }

  /** The kernel's hello, once connected. */
  get hello(): IHello | null {
    return this._hello;
  }

  set hello(value: IHello | null) {
    this._hello = value;
    this._stateChanged.emit(this._state);
  }

  /**
   * The series of the shown run (`runs.shown`) by name, in first-seen order,
   * followed by those recorded outside any run (e.g. memory) that the shown
   * run does not have.
   */
  get series(): ReadonlyMap<string, SeriesRing> {
    if (!this._view) {
      const outside = this._runs.get(NO_RUN)!;
      const shown = this._runs.get(this.runs.shown) ?? new Map();
      if (shown === outside || outside.size === 0) {
        this._view = shown;
      } else {
        this._view = new Map(shown);
        for (const [name, ring] of outside) {
          if (!shown.has(name)) {
            this._view.set(name, ring);
          }
        }
      }
    }
    return this._view;
  }

  /** The series of one run by name (NO_RUN: recorded outside any run). */
  seriesOfRun(run: number): ReadonlyMap<string, SeriesRing> {
    return this._runs.get(run) ?? new Map();
  }

  /**
   * The same series in the runs drawn faded behind the shown one
   * (`runs.overlayRuns()`), oldest first; runs without it are left out.
   */
  overlays(name: string): IRunSeries[] {
    const out: IRunSeries[] = [];
    for (const run of this.runs.overlayRuns()) {
      const ring = this._runs.get(run)?.get(name);
      if (ring && ring.length) {
        out.push({ run, ring });
      }
    }
    return out;
  }

  /**
   * `overlays(name)` as the charts take them (`LineChart.setOverlays`): the
   * same array while nothing in it changed, so a chart rebuilds only then.
   */
  overlayData(name: string): IOverlay[] {
    const runs = this.overlays(name);
    const compare = this.runs.compare;
    const recorded = this.record.overlay(name);
    const key =
      runs
        .map(r => `${r.run}:${r.ring.total}${r.run === compare ? 'c' : ''}`)
        .join(',') + (recorded ? `|${this.record.compare}` : '');
    const cached = this._overlayCache.get(name);
    if (cached && cached.key === key) {
      return cached.value;
    }
    const value: IOverlay[] = runs.map(({ run, ring }) => {
      const { x, y } = ring.toArrays();
      return { label: `run ${run}`, x, y, compare: run === compare };
    });
    if (recorded) {
      value.push(recorded);
    }
    this._overlayCache.set(name, { key, value });
    return value;
  }

  /** The same series in every held run other than the shown one, oldest first. */
  earlierSeries(name: string): IRunSeries[] {
    const shown = this.runs.shown;
    const out: IRunSeries[] = [];
    for (const run of [...this._runs.keys()].sort((a, b) => a - b)) {
      const ring = this._runs.get(run)!.get(name);
      if (run !== NO_RUN && run < shown && ring && ring.length) {
        out.push({ run, ring });
      }
    }
    return out;
  }

  /**
   * The runs the browser knows of, oldest first (NO_RUN, points outside any
   * run, first): those it holds points of, those the kernel lists, and the
   * runs of the gradient tracks it was last told of. The exports walk these.
   */
  knownRuns(): number[] {
    const runs = new Set<number>([NO_RUN, ...this._runs.keys()]);
    for (const r of this.runs.runs) {
      runs.add(r.id);
    }
    for (const t of this.grads.status?.tracks ?? []) {
      runs.add(t.run ?? NO_RUN);
    }
    return [...runs].sort((a, b) => a - b);
  }

  /** The stream's block id -> names table (PROTOCOL.md, "The name table"). */
  get names(): NameTable {
    return this._names;
  }

  /** Sequence gaps seen (a lost message triggers a resync). */
  get gaps(): number {
    return this._gaps;
  }

  /** Series blocks skipped because their id had no names (each triggers a resync). */
  get unknownBlocks(): number {
    return this._unknownBlocks;
  }

  /** Points dropped kernel-side because the pending buffer overflowed. */
  get dropped(): number {
    return this._dropped;
  }

  get stats(): IStreamStats | null {
    return this._stats;
  }

  get lastSeq(): number {
    return this._lastSeq;
  }

  /** Messages received since connect (for the rate shown in the footer). */
  get messagesReceived(): number {
    return this._messages;
  }

  /** Replace all series, and the name table, with a snapshot's. */
  applySnapshot(
    msg: ISnapshot,
    buffers: ReadonlyArray<ArrayBuffer | ArrayBufferView>
  ): void {
    this._names.reset(msg.blocks);
    this._blockRun.clear();
    const decoded = decodeBlocks(msg.blocks, buffers, this._names);
    this._runs.clear();
    this._runs.set(NO_RUN, new Map());
    this._overlayCache.clear();
    this._view = null;
    this._pushAll(msg.blocks, decoded);
    this._lastSeq = msg.seq;
    this._stats = msg.stats;
    this._messages++;
    this._dataChanged.emit();
  }

  /**
   * Append a `series` batch. Returns false when `seq` shows a gap or a block
   * id has no names in the table (the caller should ask for a snapshot); the
   * points that can be decoded are applied either way.
   */
  applySeries(
    msg: ISeries,
    buffers: ReadonlyArray<ArrayBuffer | ArrayBufferView>
  ): boolean {
    const decoded = decodeBlocks(msg.blocks, buffers, this._names);
    for (const block of decoded.blocks) {
      this._dropped += block.dropped;
    }
    this._pushAll(msg.blocks, decoded);
    const contiguous = this._lastSeq < 0 || msg.seq === this._lastSeq + 1;
    if (!contiguous) {
      this._gaps++;
    }
    this._lastSeq = msg.seq;
    this._messages++;
    this._unknownBlocks += decoded.unknown.length;
    this._dataChanged.emit();
    return contiguous && decoded.unknown.length === 0;
  }

  /** Forget the logged series only (after the kernel cleared its history). */
  clearSeries(): void {
    this._runs.clear();
    this._runs.set(NO_RUN, new Map());
    this._overlayCache.clear();
    this._view = null;
    this.runs.setStored([]);
    this._dataChanged.emit();
  }

  /** Apply a `runs` message. */
  applyRuns(msg: IRuns): void {
    this.runs.apply(msg);
  }

  /** Forget the data (kernel restarted or changed). */
  reset(): void {
    this.died = null;
    this._runs.clear();
    this._runs.set(NO_RUN, new Map());
    this._overlayCache.clear();
    this._view = null;
    this._names.clear();
    this._blockRun.clear();
    this.runs.reset();
    this._lastSeq = -1;
    this._stats = null;
    this._messages = 0;
    this.grads.reset();
    this.exception.clear();
    this.control.reset();
    this.memory.reset();
    this.ranks.reset();
    this._dataChanged.emit();
  }

  /** Store decoded blocks under their runs (`run` on the block or its id). */
  private _pushAll(blocks: IBlock[], decoded: IDecoded): void {
    for (const block of blocks) {
      if (block.run !== undefined) {
        this._blockRun.set(block.id, block.run);
      }
    }
    this._pushing = true;
    try {
      for (const block of decoded.blocks) {
        const run = this._blockRun.get(block.id) ?? NO_RUN;
        const rings = this._runRings(run);
        if (!rings) {
          continue;
        }
        block.names.forEach((name, j) => {
          let ring = rings.get(name);
          if (!ring) {
            ring = new SeriesRing(this._capacity);
            rings.set(name, ring);
            this._view = null;
          }
          ring.push(block.x, block.ys[j]);
        });
      }
    } finally {
      this._pushing = false;
    }
    // the caller emits dataChanged: only note what the charts now show
    this._view = null;
    this.grads.shownRun = this.runs.shown;
    this._viewKey = this._key();
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
    this.runs.setStored(
      [...this._runs.keys()].filter(id => id !== NO_RUN).sort((a, b) => a - b)
    );
    return rings;
  }

  /** What the charts show: the shown run and the overlaid ones. */
  private _key(): string {
    return `${this.runs.shown}|${this.runs.overlayRuns().join(',')}`;
  }

  private _onRunsChanged(): void {
    // a run that started after the last exception folds its view (issue #22)
    const runs = this.runs.runs;
    if (runs.length) {
      this.exception.runStarted(Math.max(...runs.map(r => r.start)));
    }
    this._view = null;
    this.grads.shownRun = this.runs.shown;
    if (this._pushing) {
      return; // the push's caller emits dataChanged once it is done
    }
    const key = this._key();
    if (key !== this._viewKey) {
      this._viewKey = key;
      this._dataChanged.emit();
    }
  }

  private _capacity: number;
  private _state: ConnectionState = { kind: 'connecting' };
  private _hello: IHello | null = null;
  private _maxRuns: number;
  /** run -> name -> ring (NO_RUN: points recorded outside any run). */
  private _runs = new Map<number, Map<string, SeriesRing>>();
  /** block id -> run, from the blocks that carry `run`. */
  private _blockRun = new Map<number, number>();
  private _overlayCache = new Map<string, { key: string; value: IOverlay[] }>();
  private _view: Map<string, SeriesRing> | null = null;
  private _viewKey = `${NO_RUN}|`;
  private _pushing = false;
  private _names = new NameTable();
  private _unknownBlocks = 0;
  private _lastSeq = -1;
  private _gaps = 0;
  private _dropped = 0;
  private _messages = 0;
  private _stats: IStreamStats | null = null;
  private _stateChanged = new Signal<this, ConnectionState>(this);
  private _dataChanged = new Signal<this, void>(this);
}

export namespace TorchDbgModel {
  export interface IOptions {
    /** Points kept per series (default SERIES_CAPACITY). */
    capacity?: number;
    /** Runs whose points are kept (default MAX_RUNS). */
    maxRuns?: number;
  }
}
