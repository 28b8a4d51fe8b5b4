/** SeriesRing: views without copies, the window sliding past its capacity. */
import { SeriesRing } from '../model/ringbuffer';

describe('SeriesRing', () => {
  it('keeps the last `capacity` points, oldest first, numbered from the first ever', () => {
    const ring = new SeriesRing(1000);
    for (let i = 0; i < 5000; i += 7) {
      const xs = Array.from({ length: 7 }, (_, k) => i + k);
      ring.push(
        xs,
        xs.map(v => v * 2)
      );
      const v = ring.view();
      const n = Math.min(1000, i + 7);
      expect(v.x.length).toBe(n);
      expect(v.first).toBe(i + 7 - n);
      expect(v.x[0]).toBe(v.first);
      expect(v.x[n - 1]).toBe(i + 6);
      expect(v.y[n - 1]).toBe(2 * (i + 6));
    }
    expect(ring.total).toBe(5005);
    expect(ring.last).toBe(2 * 5004);
    expect(ring.lastX).toBe(5004);
  });

  it('hands out views of its storage (no copy) and copies with toArrays', () => {
    const ring = new SeriesRing(10);
    ring.push([1, 2, 3], [10, 20, 30]);
    const a = ring.view();
    const b = ring.view();
    expect(a.x.buffer).toBe(b.x.buffer);
    expect(Array.from(a.y)).toEqual([10, 20, 30]);
    const copy = ring.toArrays();
    expect(copy.x.buffer).not.toBe(a.x.buffer);
    expect(Array.from(copy.x)).toEqual([1, 2, 3]);
  });

  it('keeps only the tail of a batch larger than the capacity', () => {
    const ring = new SeriesRing(4);
    ring.push([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]);
    expect(Array.from(ring.view().x)).toEqual([3, 4, 5, 6]);
    expect(ring.first).toBe(2);
    ring.clear();
    expect(ring.length).toBe(0);
    expect(Number.isNaN(ring.last)).toBe(true);
  });
});
