import { ISignal, Signal } from '@lumino/signaling';

import { ControlModel } from '../panels/control/model';
import { ExceptionModel } from '../panels/exception/model';
import { MemoryModel } from '../panels/memory/model';
import { GradsModel } from '../panels/grads/model';
import { decodeBlocks, NameTable } from '../protocol/codec';
import { IHello, ISeries, ISnapshot, IStreamStats } from '../protocol/messages';
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

/**
 * The state of one kernel as the panel knows it: connection state, the kernel's
 * hello, and the streamed series. Pure data with signals; no DOM.
 */
export class TorchDbgModel {
  constructor(options: TorchDbgModel.IOptions = {}) {
    this._capacity = options.capacity ?? SERIES_CAPACITY;
  }

  /** The gradient monitor's status and alarms. */
  readonly grads = new GradsModel();

  /** The last unhandled exception. */
  readonly exception = new ExceptionModel();

  /** Clip / pause / LR state of the training loop. */
  readonly control = new ControlModel();

  /** CUDA / host memory status and the last OOM autopsy. */
  readonly memory = new MemoryModel();

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

  /** Series by name, in first-seen order. */
  get series(): ReadonlyMap<string, SeriesRing> {
    return this._series;
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
    const decoded = decodeBlocks(msg.blocks, buffers, this._names);
    this._series.clear();
    for (const block of decoded.blocks) {
      block.names.forEach((name, j) => {
        this._ring(name).push(block.x, block.ys[j]);
      });
    }
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
      block.names.forEach((name, j) => {
        this._ring(name).push(block.x, block.ys[j]);
      });
    }
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
    this._series.clear();
    this._dataChanged.emit();
  }

  /** Forget the data (kernel restarted or changed). */
  reset(): void {
    this._series.clear();
    this._names.clear();
    this._lastSeq = -1;
    this._stats = null;
    this._messages = 0;
    this.grads.reset();
    this.exception.dismiss();
    this.control.reset();
    this.memory.reset();
    this._dataChanged.emit();
  }

  private _ring(name: string): SeriesRing {
    let ring = this._series.get(name);
    if (!ring) {
      ring = new SeriesRing(this._capacity);
      this._series.set(name, ring);
    }
    return ring;
  }

  private _capacity: number;
  private _state: ConnectionState = { kind: 'connecting' };
  private _hello: IHello | null = null;
  private _series = new Map<string, SeriesRing>();
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
  }
}
