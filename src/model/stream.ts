import { decodeBlocks, IDecodedBlock, NameTable } from '../protocol/codec';
import { IBlock, ISeries, ISnapshot, IStreamStats } from '../protocol/messages';
import { NO_RUN } from '../panels/runs/model';

/** A decoded block and the run its points belong to. */
export interface IRunBlock extends IDecodedBlock {
  run: number;
}

/** What a `series` or `snapshot` message decodes to. */
export interface IStreamBatch {
  blocks: IRunBlock[];
  /** Ids of blocks whose names the table did not have (skipped; resync). */
  unknown: number[];
}

/**
 * The series stream's bookkeeping (PROTOCOL.md): the block id -> names
 * table, the run of each block id, the sequence numbers and the counters
 * the footer shows. Decoding a message and noting its sequence are
 * separate steps: the model stores the points in between.
 */
export class StreamState {
  /** The stream's block id -> names table (PROTOCOL.md, "The name table"). */
  readonly names = new NameTable();

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

  /** Messages received since connect. */
  get messages(): number {
    return this._messages;
  }

  /** A snapshot's blocks, with the name table replaced by the snapshot's. */
  decodeSnapshot(
    msg: ISnapshot,
    buffers: ReadonlyArray<ArrayBuffer | ArrayBufferView>
  ): IStreamBatch {
    this.names.reset(msg.blocks);
    this._blockRun.clear();
    return this._decode(msg.blocks, buffers);
  }

  /** A `series` batch's blocks (the points dropped kernel-side are counted). */
  decodeSeries(
    msg: ISeries,
    buffers: ReadonlyArray<ArrayBuffer | ArrayBufferView>
  ): IStreamBatch {
    const batch = this._decode(msg.blocks, buffers);
    for (const block of batch.blocks) {
      this._dropped += block.dropped;
    }
    return batch;
  }

  /** Note a snapshot's sequence number and stats (after its points are stored). */
  noteSnapshot(msg: ISnapshot): void {
    this._lastSeq = msg.seq;
    this._stats = msg.stats;
    this._messages++;
  }

  /**
   * Note a `series` batch's sequence number; false when it shows a gap or
   * a block id had no names (the panel should ask for a snapshot).
   */
  noteSeries(msg: ISeries, batch: IStreamBatch): boolean {
    const contiguous = this._lastSeq < 0 || msg.seq === this._lastSeq + 1;
    if (!contiguous) {
      this._gaps++;
    }
    this._lastSeq = msg.seq;
    this._messages++;
    this._unknownBlocks += batch.unknown.length;
    return contiguous && batch.unknown.length === 0;
  }

  /**
   * Forget the names, the runs of blocks and the sequence (the kernel
   * restarted or changed). The gap, unknown-block and dropped counts are
   * kept.
   */
  reset(): void {
    this.names.clear();
    this._blockRun.clear();
    this._lastSeq = -1;
    this._stats = null;
    this._messages = 0;
  }

  /** Decode blocks; a block's run is `run` on it or on an earlier block of its id. */
  private _decode(
    blocks: IBlock[],
    buffers: ReadonlyArray<ArrayBuffer | ArrayBufferView>
  ): IStreamBatch {
    const decoded = decodeBlocks(blocks, buffers, this.names);
    for (const block of blocks) {
      if (block.run !== undefined) {
        this._blockRun.set(block.id, block.run);
      }
    }
    return {
      blocks: decoded.blocks.map(b => ({
        ...b,
        run: this._blockRun.get(b.id) ?? NO_RUN
      })),
      unknown: decoded.unknown
    };
  }

  /** block id -> run, from the blocks that carry `run`. */
  private _blockRun = new Map<number, number>();
  private _unknownBlocks = 0;
  private _lastSeq = -1;
  private _gaps = 0;
  private _dropped = 0;
  private _messages = 0;
  private _stats: IStreamStats | null = null;
}
