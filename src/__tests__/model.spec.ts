import { decimateMinMax } from '../charts/decimate';
import { TorchDbgModel } from '../model/model';
import { SeriesRing } from '../model/ringbuffer';
import { decodeBlocks } from '../protocol/codec';
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
  it('splits series-major y per name', () => {
    const { x, y } = encodeBlock(
      [0, 1, 2],
      [
        [1, 2, 3],
        [4, 5, 6]
      ]
    );
    const [block] = decodeBlocks([{ names: ['a', 'b'], count: 3 }], [x, y]);
    expect(Array.from(block.ys[0])).toEqual([1, 2, 3]);
    expect(Array.from(block.ys[1])).toEqual([4, 5, 6]);
  });

  it('accepts unaligned views (comm buffers)', () => {
    const raw = new Uint8Array(1 + 8);
    raw.set(new Uint8Array(new Float64Array([7]).buffer), 1);
    const yRaw = new Uint8Array(1 + 4);
    yRaw.set(new Uint8Array(new Float32Array([3]).buffer), 1);
    const [block] = decodeBlocks(
      [{ names: ['a'], count: 1 }],
      [new DataView(raw.buffer, 1, 8), new DataView(yRaw.buffer, 1, 4)]
    );
    expect(block.x[0]).toBe(7);
    expect(block.ys[0][0]).toBe(3);
  });

  it('throws on a size mismatch instead of misreading', () => {
    const { x, y } = encodeBlock([0, 1], [[1, 2]]);
    expect(() => decodeBlocks([{ names: ['a'], count: 3 }], [x, y])).toThrow(
      'size mismatch'
    );
    expect(() => decodeBlocks([{ names: ['a'], count: 2 }], [x])).toThrow(
      'expected 2 buffers'
    );
  });
});

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
        blocks: [{ names: ['loss'], count: 2 }],
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
          blocks: [{ names: ['loss'], count: 1, dropped: 4 }]
        },
        [b.x, b.y]
      )
    ).toBe(true);
    expect(
      m.applySeries(
        { method: 'series', seq: 10, blocks: [{ names: ['loss'], count: 1 }] },
        [b.x, b.y]
      )
    ).toBe(false);
    expect(m.gaps).toBe(1);
    expect(m.dropped).toBe(4);
    expect(m.series.get('loss')?.length).toBe(4);
    expect(Number.isNaN(m.series.get('loss')!.last)).toBe(true);
    expect(changes).toBe(3);
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
