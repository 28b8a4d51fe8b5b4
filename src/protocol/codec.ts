import { IBlock } from './messages';

/** One decoded block: x values and one y array per name. */
export interface IDecodedBlock {
  names: string[];
  x: Float64Array;
  ys: Float32Array[];
  dropped: number;
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
 * Decode the binary buffers of a `series` or `snapshot` message.
 *
 * Layout per block, in order: x as float64 (count values), then y as float32
 * (count * names.length values, series-major). Both little-endian.
 * Throws on a buffer whose size does not match its header.
 */
export function decodeBlocks(
  blocks: IBlock[],
  buffers: ReadonlyArray<ArrayBuffer | ArrayBufferView>
): IDecodedBlock[] {
  if (buffers.length !== blocks.length * 2) {
    throw new Error(
      `expected ${blocks.length * 2} buffers, got ${buffers.length}`
    );
  }
  return blocks.map((block, i) => {
    const xb = aligned(buffers[2 * i]);
    const yb = aligned(buffers[2 * i + 1]);
    const n = block.count;
    const k = block.names.length;
    if (xb.byteLength !== n * 8 || yb.byteLength !== n * k * 4) {
      throw new Error(`buffer size mismatch in block ${i}`);
    }
    const x = new Float64Array(xb);
    const yAll = new Float32Array(yb);
    const ys = block.names.map((_, j) => yAll.subarray(j * n, (j + 1) * n));
    return { names: block.names, x, ys, dropped: block.dropped ?? 0 };
  });
}
