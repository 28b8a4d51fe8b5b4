import { decimateMinMax } from '../charts/decimate';
import { TorchDbgModel } from '../model/model';
import { SeriesRing } from '../model/ringbuffer';
import { decodeBlocks, NameTable } from '../protocol/codec';
import { encodeBlock } from './fakeKernel';

describe('SeriesRing', () => {
  it('keeps the newest points in order once full', () => {
    const r = new SeriesRing(4);
    r.push([0, 1, 2], [10, 11, 12]);
    r.push([3, 4, 5], [13, 14, 15]);
    const { x, y } = r.toArrays();
    expect(Array.from(x)).toEqual([2, 3, 4, 5]);
    expect(Array.from(y)).toEqual([12, 13, 14, 15]);
    expect(r.total).toBe(6);
    expect(r.last).toBe(15);
    expect(r.lastX).toBe(5);
  });

  it('takes only the tail of a batch larger than its capacity', () => {
    const r = new SeriesRing(3);
    r.push([0, 1, 2, 3, 4], [0, 1, 2, 3, 4]);
    expect(Array.from(r.toArrays().x)).toEqual([2, 3, 4]);
  });
});

describe('decodeBlocks', () => {
  it('splits row-major y per name', () => {
    const { x, y } = encodeBlock(
      [0, 1, 2],
      [
        [1, 2, 3],
        [4, 5, 6]
      ]
    );
    expect(Array.from(new Float32Array(y))).toEqual([1, 4, 2, 5, 3, 6]);
    const {
      blocks: [block]
    } = decodeBlocks(
      [{ id: 1, names: ['a', 'b'], count: 3 }],
      [x, y],
      new NameTable()
    );
    expect(block.names).toEqual(['a', 'b']);
    expect(Array.from(block.ys[0])).toEqual([1, 2, 3]);
    expect(Array.from(block.ys[1])).toEqual([4, 5, 6]);
  });

  it('learns names once and decodes later blocks by id alone', () => {
    const table = new NameTable();
    const first = encodeBlock([0], [[1], [2]]);
    decodeBlocks(
      [{ id: 3, names: ['u', 'v'], count: 1 }],
      [first.x, first.y],
      table
    );
    const later = encodeBlock(
      [1, 2],
      [
        [3, 4],
        [5, 6]
      ]
    );
    const { blocks, unknown } = decodeBlocks(
      [{ id: 3, count: 2 }],
      [later.x, later.y],
      table
    );
    expect(unknown).toEqual([]);
    expect(blocks[0].names).toEqual(['u', 'v']);
    expect(Array.from(blocks[0].ys[1])).toEqual([5, 6]);
  });

  it('skips and reports a block id it has no names for', () => {
    const a = encodeBlock([0], [[1]]);
    const b = encodeBlock([0], [[2]]);
    const { blocks, unknown } = decodeBlocks(
      [
        { id: 9, count: 1 },
        { id: 2, names: ['ok'], count: 1 }
      ],
      [a.x, a.y, b.x, b.y],
      new NameTable()
    );
    expect(unknown).toEqual([9]);
    expect(blocks.map(bl => bl.names)).toEqual([['ok']]);
  });

  it('accepts unaligned views (comm buffers)', () => {
    const raw = new Uint8Array(1 + 8);
    raw.set(new Uint8Array(new Float64Array([7]).buffer), 1);
    const yRaw = new Uint8Array(1 + 4);
    yRaw.set(new Uint8Array(new Float32Array([3]).buffer), 1);
    const {
      blocks: [block]
    } = decodeBlocks(
      [{ id: 1, names: ['a'], count: 1 }],
      [new DataView(raw.buffer, 1, 8), new DataView(yRaw.buffer, 1, 4)],
      new NameTable()
    );
    expect(block.x[0]).toBe(7);
    expect(block.ys[0][0]).toBe(3);
  });

  it('throws on a size mismatch instead of misreading', () => {
    const { x, y } = encodeBlock([0, 1], [[1, 2]]);
    const table = new NameTable();
    expect(() =>
      decodeBlocks([{ id: 1, names: ['a'], count: 3 }], [x, y], table)
    ).toThrow('size mismatch');
    expect(() =>
      decodeBlocks([{ id: 1, names: ['a'], count: 2 }], [x], table)
    ).toThrow('expected 2 buffers');
  });
});

const STATS = { messages: 0, points: 0, errors: {} };

describe('TorchDbgModel', () => {
  it('a snapshot replaces history; series append; gaps counted', () => {
    const m = new TorchDbgModel({ capacity: 100 });
    let changes = 0;
    m.dataChanged.connect(() => changes++);
    const s = encodeBlock([0, 1], [[5, 6]]);
    m.applySnapshot(
      {
        method: 'snapshot',
        seq: 7,
        blocks: [{ id: 1, names: ['loss'], count: 2 }],
        stats: { messages: 7, points: 2, errors: {} }
      },
      [s.x, s.y]
    );
    const b = encodeBlock([2], [[NaN]]);
    expect(
      m.applySeries(
        {
          method: 'series',
          seq: 8,
          blocks: [{ id: 1, count: 1, dropped: 4 }]
        },
        [b.x, b.y]
      )
    ).toBe(true);
    expect(
      m.applySeries(
        { method: 'series', seq: 10, blocks: [{ id: 1, count: 1 }] },
        [b.x, b.y]
      )
    ).toBe(false);
    expect(m.gaps).toBe(1);
    expect(m.dropped).toBe(4);
    expect(m.series.get('loss')?.length).toBe(4);
    expect(Number.isNaN(m.series.get('loss')!.last)).toBe(true);
    expect(changes).toBe(3);
  });

  it('keeps the name table: names once, a changed block under a new id', () => {
    const m = new TorchDbgModel({ capacity: 100 });
    const one = encodeBlock([0], [[1], [2]]);
    expect(
      m.applySeries(
        {
          method: 'series',
          seq: 1,
          blocks: [{ id: 1, names: ['grad/l0', 'grad/l1'], count: 1 }]
        },
        [one.x, one.y]
      )
    ).toBe(true);
    expect(m.names.get(1)).toEqual(['grad/l0', 'grad/l1']);
    // the layers changed: the kernel announces a new block id with new names
    const two = encodeBlock([1], [[3], [4], [5]]);
    expect(
      m.applySeries(
        {
          method: 'series',
          seq: 2,
          blocks: [
            { id: 1, count: 1 },
            { id: 2, names: ['grad/l0', 'grad/l1', 'grad/l2'], count: 1 }
          ]
        },
        [one.x, one.y, two.x, two.y]
      )
    ).toBe(true);
    expect(m.names.size).toBe(2);
    expect(Array.from(m.series.get('grad/l2')!.toArrays().y)).toEqual([5]);
    expect(m.series.get('grad/l0')!.length).toBe(3);
    // a snapshot replaces the table: ids it does not list are unknown again
    const h = encodeBlock([0], [[7]]);
    m.applySnapshot(
      {
        method: 'snapshot',
        seq: 2,
        blocks: [{ id: 5, names: ['loss'], count: 1 }],
        stats: STATS
      },
      [h.x, h.y]
    );
    expect(m.names.get(5)).toEqual(['loss']);
    expect(m.names.get(1)).toBeUndefined();
    expect(
      m.applySeries(
        { method: 'series', seq: 3, blocks: [{ id: 1, count: 1 }] },
        [one.x, one.y]
      )
    ).toBe(false);
    expect(m.unknownBlocks).toBe(1);
    m.reset();
    expect(m.names.size).toBe(0);
  });
});

describe('decimateMinMax', () => {
  it('keeps spikes that striding would lose', () => {
    const n = 10000;
    const x = Array.from({ length: n }, (_, i) => i);
    const y = x.map(i => (i === 4321 ? 1000 : Math.sin(i / 100)));
    const d = decimateMinMax(x, y, 100);
    expect(d.x.length).toBeLessThanOrEqual(200);
    expect(Math.max(...(d.y.filter(v => v !== null) as number[]))).toBe(1000);
    // x stays sorted
    for (let i = 1; i < d.x.length; i++) {
      expect(d.x[i]).toBeGreaterThanOrEqual(d.x[i - 1]);
    }
  });

  it('turns non-finite values into gaps and counts them', () => {
    const d = decimateMinMax([0, 1, 2], [1, NaN, Infinity], 10);
    expect(d.y).toEqual([1, null, null]);
    expect(d.nonFinite).toBe(2);
  });

  it('keeps x sorted when a bucket has a gap before its extremes', () => {
    const n = 1000;
    const x = Array.from({ length: n }, (_, i) => i);
    const y = x.map(i => (i % 10 === 3 ? NaN : i % 7));
    const d = decimateMinMax(x, y, 50);
    for (let i = 1; i < d.x.length; i++) {
      expect(d.x[i]).toBeGreaterThanOrEqual(d.x[i - 1]);
    }
    expect(d.nonFinite).toBe(100);
  });
});
