/**
 * Chart internals without a browser: the shared frame scheduler (one frame,
 * only dirty charts in view are drawn), incremental min/max decimation (equal
 * to decimating the same data from scratch), TensorBoard's EMA smoothing.
 */
import {
  bucketSizeFor,
  decimateAligned,
  IAlignedDecimated
} from '../charts/aligned';
import { MinMaxDecimator } from '../charts/minMaxDecimator';
import { FrameScheduler } from '../charts/frame';
import { SeriesRing } from '../model/ringbuffer';

/** A fake IntersectionObserver the test drives by hand. */
class FakeIO {
  static last: FakeIO;
  constructor(cb: (entries: IntersectionObserverEntry[]) => void) {
    this.cb = cb;
    FakeIO.last = this;
  }
  observe(node: Element): void {
    this.nodes.add(node);
  }
  unobserve(node: Element): void {
    this.nodes.delete(node);
  }
  disconnect(): void {}
  /** Report visibility of some nodes, as the browser does. */
  report(changes: [Element, boolean][]): void {
    this.cb(
      changes.map(
        ([target, isIntersecting]) =>
          ({ target, isIntersecting }) as IntersectionObserverEntry
      )
    );
  }
  cb: (entries: IntersectionObserverEntry[]) => void;
  nodes = new Set<Element>();
}

function scheduler() {
  const pending: (() => void)[] = [];
  const s = new FrameScheduler({
    requestFrame: cb => pending.push(cb),
    IntersectionObserver: FakeIO as unknown as typeof IntersectionObserver
  });
  const runFrame = () => {
    const cbs = pending.splice(0);
    cbs.forEach(cb => cb());
    return cbs.length;
  };
  return { s, pending, runFrame, io: FakeIO.last };
}

/** A stand-in for a chart's DOM node (the scheduler only keys on it). */
function node(name: string): Element {
  return { name } as unknown as Element;
}

describe('FrameScheduler', () => {
  it('draws only dirty charts in view, all in one frame', () => {
    const { s, pending, runFrame, io } = scheduler();
    const drawn: string[] = [];
    const nodes = ['a', 'b', 'c', 'd'].map(node);
    const handles = nodes.map((n, i) =>
      s.add(n, () => {
        drawn.push('abcd'[i]);
      })
    );
    expect(io.nodes.size).toBe(4);
    io.report([
      [nodes[0], true],
      [nodes[1], true],
      [nodes[2], false],
      [nodes[3], false]
    ]);
    handles.forEach(h => h.markDirty());
    // one frame requested for all four
    expect(pending).toHaveLength(1);
    runFrame();
    // a and b in view; c and d get their one first draw (at most 2 a frame)
    expect(drawn.sort()).toEqual(['a', 'b', 'c', 'd']);
    drawn.length = 0;
    // from now on only dirty charts in view are drawn
    handles.forEach(h => h.markDirty());
    handles[0].markDirty();
    expect(pending).toHaveLength(1);
    runFrame();
    expect(drawn.sort()).toEqual(['a', 'b']);
    drawn.length = 0;
    handles[0].markDirty();
    runFrame();
    expect(drawn).toEqual(['a']);
    drawn.length = 0;
    // d comes into view: drawn then, with its latest data (it kept its dirty mark)
    io.report([[nodes[3], true]]);
    runFrame();
    expect(drawn).toEqual(['d']);
    // c out of view and dirty: a frame with nothing visible to draw is not requested
    const before = s.framesRequested;
    handles[2].markDirty();
    expect(s.framesRequested).toBe(before);
    expect(pending).toHaveLength(0);
  });

  it('spreads the first draws of many new charts out of view over frames', () => {
    const { s, runFrame, io } = scheduler();
    let draws = 0;
    const nodes = Array.from({ length: 7 }, (_, i) => node(String(i)));
    const handles = nodes.map(n =>
      s.add(n, () => {
        draws++;
      })
    );
    io.report(nodes.map(n => [n, false] as [Element, boolean]));
    handles.forEach(h => h.markDirty());
    const perFrame: number[] = [];
    while (runFrame()) {
      perFrame.push(draws);
    }
    expect(perFrame).toEqual([2, 4, 6, 7]);
  });

  it('stops drawing a chart hidden with its panel, and forgets a disposed one', () => {
    const { s, runFrame, io } = scheduler();
    let draws = 0;
    const n = node('x');
    const h = s.add(n, () => {
      draws++;
    });
    io.report([[n, true]]);
    h.markDirty();
    runFrame();
    expect(draws).toBe(1);
    io.report([[n, false]]); // the sidebar tab was switched
    for (let i = 0; i < 5; i++) {
      h.markDirty();
      runFrame();
    }
    expect(draws).toBe(1);
    io.report([[n, true]]); // shown again: one draw of the latest data
    runFrame();
    expect(draws).toBe(2);
    h.dispose();
    expect(io.nodes.size).toBe(0);
    h.markDirty();
    runFrame();
    expect(draws).toBe(2);
  });
});

function plain(d: IAlignedDecimated) {
  return {
    x: Array.from(d.x.subarray(0, d.length)),
    y: Array.from(d.y.subarray(0, d.length)),
    index: Array.from(d.index.subarray(0, d.length)),
    nonFinite: d.nonFinite
  };
}

/** A deterministic noisy series with spikes, NaN and Inf here and there. */
function value(i: number): number {
  if (i % 997 === 13) {
    return NaN;
  }
  if (i % 1511 === 7) {
    return Infinity;
  }
  const spike = i % 389 === 0 ? 40 : 0;
  return Math.sin(i / 30) * 3 + ((i * 7919) % 101) / 50 + spike - 1;
}

describe('MinMaxDecimator (incremental)', () => {
  it.each([false, true])(
    'equals decimating the same data from scratch, while the ring fills and slides (positive=%s)',
    positive => {
      const ring = new SeriesRing(3000);
      const dec = new MinMaxDecimator(200, positive);
      let step = 0;
      // batches of uneven sizes, past the capacity (the window slides)
      for (const batch of [1, 5, 37, 400, 3, 1200, 999, 2500, 7, 4100, 1]) {
        const xs = Array.from({ length: batch }, (_, k) => step + k);
        ring.push(
          xs,
          xs.map(i => value(i))
        );
        step += batch;
        const got = plain(dec.update(ring.view()));
        const want = plain(decimateAligned(ring.view(), dec.size, positive));
        expect(got).toEqual(want);
        // bounded: at most 3 points per bucket, at most `buckets` buckets
        expect(got.x.length).toBeLessThanOrEqual(3 * 200);
        expect(dec.size).toBeGreaterThanOrEqual(
          bucketSizeFor(ring.length, 200) / 2
        );
      }
      // spikes survive decimation
      const view = ring.view();
      let max = -Infinity;
      view.y.forEach(v => {
        max = Number.isFinite(v) && v > max ? v : max;
      });
      expect(
        Math.max(...plain(dec.update(view)).y.filter(Number.isFinite))
      ).toBe(max);
    }
  );

  it('keeps x sorted and a gap (NaN) at the first non-finite value of a bucket', () => {
    const ring = new SeriesRing(100);
    ring.push([0, 1, 2, 3, 4, 5, 6, 7], [1, 5, NaN, 2, 0.5, 3, Infinity, 4]);
    const dec = new MinMaxDecimator(3); // buckets of 4 points
    const d = plain(dec.update(ring.view()));
    expect(dec.size).toBe(4);
    for (let i = 1; i < d.x.length; i++) {
      expect(d.x[i]).toBeGreaterThan(d.x[i - 1]);
    }
    // bucket 0: min 1 @0, max 5 @1, gap @2; bucket 1: min 0.5 @4, max 4 @7, gap @6
    expect(d.x).toEqual([0, 1, 2, 4, 6, 7]);
    expect(d.y.map(v => (Number.isNaN(v) ? null : v))).toEqual([
      1,
      5,
      null,
      0.5,
      null,
      4
    ]);
    expect(d.nonFinite).toBe(2);
  });

  it('log-y (positive): values <= 0 are left out; a bucket of only those is a gap', () => {
    const ring = new SeriesRing(100);
    ring.push([0, 1, 2, 3, 4, 5, 6, 7], [0, -1, 2, 8, -5, 0, -0, -3]);
    const d = plain(new MinMaxDecimator(3, true).update(ring.view()));
    // bucket 0 keeps 2 and 8 (0 and -1 cannot be drawn), bucket 1 has nothing
    expect(d.x).toEqual([2, 3, 4]);
    expect(d.y.slice(0, 2)).toEqual([2, 8]);
    expect(Number.isNaN(d.y[2])).toBe(true);
    expect(d.y.filter(v => v <= 0)).toEqual([]);
  });

  it('starts over when the ring is cleared and refilled', () => {
    const ring = new SeriesRing(50);
    const dec = new MinMaxDecimator(10);
    ring.push([0, 1, 2, 3], [4, 3, 2, 1]);
    dec.update(ring.view());
    ring.clear();
    ring.push([0, 1], [7, 9]);
    expect(plain(dec.update(ring.view()))).toEqual(
      plain(decimateAligned(ring.view(), dec.size))
    );
    expect(plain(dec.update(ring.view())).y).toEqual([7, 9]);
  });
});

describe('FrameScheduler first draws', () => {
  it('owes a first draw until the chart could draw (it had no width yet)', () => {
    const { s, runFrame, io } = scheduler();
    let width = 0;
    let draws = 0;
    const n = node('late');
    const h = s.add(n, () => {
      if (width === 0) {
        return false;
      }
      draws++;
      return true;
    });
    io.report([[n, false]]);
    h.markDirty();
    runFrame();
    expect(draws).toBe(0);
    width = 200; // laid out now, still out of view
    h.markDirty();
    runFrame();
    expect(draws).toBe(1);
    h.markDirty();
    runFrame();
    expect(draws).toBe(1); // drawn once: out of view, no more
  });
});
