import { IBlock, ISnapshotBlock } from './messages';

/** One decoded block: x values and one y array per name. */
export interface IDecodedBlock {
  id: number;
  names: string[];
  x: Float64Array;
  ys: Float32Array[];
  dropped: number;
}

/** What a message decoded to, and the blocks it could not decode. */
export interface IDecoded {
  blocks: IDecodedBlock[];
  /** Ids of blocks whose names the table did not have (skipped; resync). */
  unknown: number[];
}

/**
 * The panel's block id -> names table (PROTOCOL.md, "The name table"): a
 * `series` block carries its names only the first time its id goes out, and
 * every snapshot carries the whole table.
 */
export class NameTable {
  /** Names of a block id, or undefined when it was never announced. */
  get(id: number): string[] | undefined {
    return this._names.get(id);
  }

  /** Number of known block ids. */
  get size(): number {
    return this._names.size;
  }

  /** Replace the table with a snapshot's blocks (each carries its names). */
  reset(blocks: ReadonlyArray<ISnapshotBlock>): void {
    this._names.clear();
    for (const block of blocks) {
      this._names.set(block.id, block.names);
    }
  }

  /** Forget every id (a new kernel session). */
  clear(): void {
    this._names.clear();
  }

  /** Record the names a block carries, if any; return the names of its id. */
  learn(block: IBlock): string[] | undefined {
    if (block.names) {
      this._names.set(block.id, block.names);
    }
    return this._names.get(block.id);
  }

  private _names = new Map<number, string[]>();
}

/**
 * Copy `bytes` into a fresh, aligned ArrayBuffer (comm buffers may be views at
 * arbitrary offsets; typed arrays need alignment).
 */
function aligned(view: ArrayBuffer | ArrayBufferView): ArrayBuffer {
  // ArrayBuffer.isView rather than instanceof: buffers may come from another realm.
  if (!ArrayBuffer.isView(view)) {
    return new Uint8Array(view).slice().buffer;
  }
  const out = new ArrayBuffer(view.byteLength);
  new Uint8Array(out).set(
    new Uint8Array(view.buffer, view.byteOffset, view.byteLength)
  );
  return out;
}

/**
 * Decode the binary buffers of a `series` or `snapshot` message, learning the
 * names the blocks carry into `table` (call `table.reset` first for a snapshot).
 *
 * Layout per block, in order: x as float64 (count values), then y as float32
 * (count * names.length values, row-major: for each x one value per name).
 * Both little-endian. A block whose id has no names in the table is skipped
 * and reported in `unknown`. Throws on a buffer whose size does not match its
 * header.
 */
export function decodeBlocks(
  blocks: IBlock[],
  buffers: ReadonlyArray<ArrayBuffer | ArrayBufferView>,
  table: NameTable
): IDecoded {
  if (buffers.length !== blocks.length * 2) {
    throw new Error(
      `expected ${blocks.length * 2} buffers, got ${buffers.length}`
    );
  }
  const out: IDecodedBlock[] = [];
  const unknown: number[] = [];
  blocks.forEach((block, i) => {
    const names = table.learn(block);
    if (!names) {
      unknown.push(block.id);
      return;
    }
    const xb = aligned(buffers[2 * i]);
    const yb = aligned(buffers[2 * i + 1]);
    const n = block.count;
    const k = names.length;
    if (xb.byteLength !== n * 8 || yb.byteLength !== n * k * 4) {
      throw new Error(`buffer size mismatch in block ${i}`);
    }
    const x = new Float64Array(xb);
    const yAll = new Float32Array(yb);
    const ys = names.map((_, j) => (k === 1 ? yAll : column(yAll, n, k, j)));
    out.push({ id: block.id, names, x, ys, dropped: block.dropped ?? 0 });
  });
  return { blocks: out, unknown };
}

/** Column `j` of a row-major `n x k` matrix. */
function column(
  rows: Float32Array,
  n: number,
  k: number,
  j: number
): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0, p = j; i < n; i++, p += k) {
    out[i] = rows[p];
  }
  return out;
}
