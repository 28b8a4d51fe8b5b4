/**
 * Min/max decimation in aligned buckets, as the live charts draw a ring: the
 * points are numbered from the first ever appended (`first` is the number of
 * the first one given) and bucket `b` holds points `b * size` to
 * `(b + 1) * size - 1`. Per bucket, in index order: its minimum and maximum,
 * and a gap (null) at its first non-finite value; a bucket with nothing
 * drawable is one null point. `positive` (a log scale) leaves out values <= 0.
 *
 * `MinMaxDecimator` (minMaxDecimator.ts) keeps these buckets and adds only the
 * new points at each update; `decimateAligned` computes them from scratch (the
 * reference the tests compare it with).
 */

/** Aligned min/max decimation's output (either way). */
export interface IAlignedDecimated {
  /** x of each output point. */
  x: Float64Array;
  /** y of each output point, NaN where the line has a gap. */
  y: Float64Array;
  /** Number (as `first`) of the source point behind each output point. */
  index: Float64Array;
  /** Output points. */
  length: number;
  /** Non-finite source values seen in the buckets. */
  nonFinite: number;
}

/** The smallest power-of-two bucket size giving at most `buckets` buckets for `n` points. */
export function bucketSizeFor(n: number, buckets: number): number {
  let size = 1;
  const most = Math.max(1, buckets - 1); // an unaligned window adds one bucket
  while (Math.ceil(n / size) > most) {
    size *= 2;
  }
  return size;
}

/** The source the decimator reads: points `first` .. `first + x.length - 1`. */
export interface IRingView {
  x: ArrayLike<number>;
  y: ArrayLike<number>;
  first: number;
}

/** What `MinMaxDecimator` gives, computed from scratch with bucket size `size`. */
export function decimateAligned(
  view: IRingView,
  size: number,
  positive = false
): IAlignedDecimated {
  const n = view.x.length;
  const first = view.first;
  const out = {
    x: [] as number[],
    y: [] as number[],
    index: [] as number[],
    nonFinite: 0
  };
  const put = (i: number, y: number) => {
    out.index.push(i);
    out.x.push(view.x[i - first]);
    out.y.push(y);
  };
  if (n > 0) {
    const last = Math.floor((first + n - 1) / size);
    for (let key = Math.floor(first / size); key <= last; key++) {
      const lo = Math.max(first, key * size);
      const hi = Math.min(first + n, (key + 1) * size);
      let iMin = -1;
      let iMax = -1;
      let gap = -1;
      for (let i = lo; i < hi; i++) {
        const v = view.y[i - first];
        if (!Number.isFinite(v)) {
          out.nonFinite++;
          gap = gap < 0 ? i : gap;
        } else if (!positive || v > 0) {
          iMin = iMin < 0 || v < view.y[iMin - first] ? i : iMin;
          iMax = iMax < 0 || v > view.y[iMax - first] ? i : iMax;
        }
      }
      if (iMin < 0) {
        const at = gap >= 0 ? gap : lo;
        out.index.push(gap >= 0 ? gap : key * size);
        out.x.push(view.x[at - first]);
        out.y.push(NaN);
        continue;
      }
      const pts = [Math.min(iMin, iMax)];
      if (iMax !== iMin) {
        pts.push(Math.max(iMin, iMax));
      }
      for (const i of pts) {
        if (gap >= 0 && gap < i) {
          put(gap, NaN);
          gap = -1;
        }
        put(i, view.y[i - first]);
      }
      if (gap >= 0) {
        put(gap, NaN);
      }
    }
  }
  return {
    x: Float64Array.from(out.x),
    y: Float64Array.from(out.y),
    index: Float64Array.from(out.index),
    length: out.x.length,
    nonFinite: out.nonFinite
  };
}
