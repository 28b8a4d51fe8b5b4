import { ISignal, Signal } from '@lumino/signaling';

import { ControlModel } from '../panels/control/model';
import { ExceptionModel } from '../panels/exception/model';
import { MemoryModel } from '../panels/memory/model';
import type { IOverlay } from '../charts/lineChart';
import { GradsModel } from '../panels/grads/model';
import { RanksModel } from '../panels/ranks/model';
import { RecordModel } from '../panels/record/model';
import { MAX_RUNS, NO_RUN, RunsModel } from '../panels/runs/model';
import { NameTable } from '../protocol/codec';
import type { IRuns } from '../protocol/generated';
import { IHello, ISeries, ISnapshot, IStreamStats } from '../protocol/messages';
import type { ConnectionState } from './connectionState';
import { SeriesRing } from './ringbuffer';
import { IRunSeries, RunSeries, SERIES_CAPACITY } from './runSeries';
import { IStreamBatch, StreamState } from './stream';

// What the rest of the front end imports from here: the connection state
// (connectionState.ts), the per-run series store (runSeries.ts).
export type { ConnectionState } from './connectionState';
export { SERIES_CAPACITY } from './runSeries';
export type { IRunSeries } from './runSeries';

/**
 * The state of one kernel as the panel knows it: connection state, the kernel's
 * hello, the streamed series (held by run in `RunSeries`, decoded and counted
 * by `StreamState`) and the panels' own models. Pure data with signals; no DOM.
 */
export class TorchDbgModel {
  constructor(options: TorchDbgModel.IOptions = {}) {
    this._store = new RunSeries(
      options.capacity ?? SERIES_CAPACITY,
      options.maxRuns ?? MAX_RUNS,
      held => this.runs.setStored(held)
    );
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
    return this._store.view(this.runs.shown);
  }

  /** The series of one run by name (NO_RUN: recorded outside any run). */
  seriesOfRun(run: number): ReadonlyMap<string, SeriesRing> {
    return this._store.ofRun(run);
  }

  /**
   * The same series in the runs drawn faded behind the shown one
   * (`runs.overlayRuns()`), oldest first; runs without it are left out.
   */
  overlays(name: string): IRunSeries[] {
    const out: IRunSeries[] = [];
    for (const run of this.runs.overlayRuns()) {
      const ring = this._store.ofRun(run).get(name);
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
    return this._store.earlier(this.runs.shown, name);
  }

  /**
   * The runs the browser knows of, oldest first (NO_RUN, points outside any
   * run, first): those it holds points of, those the kernel lists, and the
   * runs of the gradient tracks it was last told of. The exports walk these.
   */
  knownRuns(): number[] {
    const runs = new Set<number>([NO_RUN, ...this._store.runIds()]);
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
    return this._stream.names;
  }

  /** Sequence gaps seen (a lost message triggers a resync). */
  get gaps(): number {
    return this._stream.gaps;
  }

  /** Series blocks skipped because their id had no names (each triggers a resync). */
  get unknownBlocks(): number {
    return this._stream.unknownBlocks;
  }

  /** Points dropped kernel-side because the pending buffer overflowed. */
  get dropped(): number {
    return this._stream.dropped;
  }

  get stats(): IStreamStats | null {
    return this._stream.stats;
  }

  get lastSeq(): number {
    return this._stream.lastSeq;
  }

  /** Messages received since connect (for the rate shown in the footer). */
  get messagesReceived(): number {
    return this._stream.messages;
  }

  /** Replace all series, and the name table, with a snapshot's. */
  applySnapshot(
    msg: ISnapshot,
    buffers: ReadonlyArray<ArrayBuffer | ArrayBufferView>
  ): void {
    const batch = this._stream.decodeSnapshot(msg, buffers);
    this._clearSeries();
    this._pushAll(batch);
    this._stream.noteSnapshot(msg);
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
    const batch = this._stream.decodeSeries(msg, buffers);
    this._pushAll(batch);
    const ok = this._stream.noteSeries(msg, batch);
    this._dataChanged.emit();
    return ok;
  }

  /** Forget the logged series only (after the kernel cleared its history). */
  clearSeries(): void {
    this._clearSeries();
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
    this._clearSeries();
    this.runs.reset();
    this._stream.reset();
    this.grads.reset();
    this.exception.clear();
    this.control.reset();
    this.memory.reset();
    this.ranks.reset();
    this._dataChanged.emit();
  }

  /** Forget every run's points and the overlays made of them. */
  private _clearSeries(): void {
    this._store.clear();
    this._overlayCache.clear();
  }

  /** Store decoded blocks under their runs. */
  private _pushAll(batch: IStreamBatch): void {
    this._pushing = true;
    try {
      for (const block of batch.blocks) {
        this._store.push(block.run, block.names, block.x, block.ys);
      }
    } finally {
      this._pushing = false;
    }
    // the caller emits dataChanged: only note what the charts now show
    this._store.invalidateView();
    this.grads.shownRun = this.runs.shown;
    this._viewKey = this._key();
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
    this._store.invalidateView();
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

  private _state: ConnectionState = { kind: 'connecting' };
  private _hello: IHello | null = null;
  private _store: RunSeries;
  private _stream = new StreamState();
  private _overlayCache = new Map<string, { key: string; value: IOverlay[] }>();
  private _viewKey = `${NO_RUN}|`;
  private _pushing = false;
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
