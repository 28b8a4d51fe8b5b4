/*
 * One-shot decimation of whole arrays, for data set in one piece (setData,
 * overlays). A ring drawn live is decimated incrementally in aligned buckets
 * instead: aligned.ts and minMaxDecimator.ts.
 */

/**
 * Min/max decimation: split the points into `buckets` equal ranges of index and
 * keep, in order, the minimum and the maximum of each. Spikes survive (unlike
 * plain striding) and at most 2 * buckets points are drawn. Non-finite y values
 * become null (a gap in the line) and are reported in `nonFinite`.
 */
export interface IDecimated {
  x: number[];
  y: (number | null)[];
  nonFinite: number;
}

export function decimateMinMax(
  x: ArrayLike<number>,
  y: ArrayLike<number>,
  buckets: number
): IDecimated {
  const n = x.length;
  const outX: number[] = [];
  const outY: (number | null)[] = [];
  let nonFinite = 0;
  if (n <= buckets * 2) {
    for (let i = 0; i < n; i++) {
      const v = y[i];
      const ok = Number.isFinite(v);
      if (!ok) {
        nonFinite++;
      }
      outX.push(x[i]);
      outY.push(ok ? v : null);
    }
    return { x: outX, y: outY, nonFinite };
  }
  const size = n / buckets;
  for (let b = 0; b < buckets; b++) {
    const lo = Math.floor(b * size);
    const hi = Math.min(n, Math.floor((b + 1) * size));
    let iMin = -1;
    let iMax = -1;
    let gap = -1;
    for (let i = lo; i < hi; i++) {
      const v = y[i];
      if (!Number.isFinite(v)) {
        nonFinite++;
        if (gap < 0) {
          gap = i;
        }
        continue;
      }
      if (iMin < 0 || v < y[iMin]) {
        iMin = i;
      }
      if (iMax < 0 || v > y[iMax]) {
        iMax = i;
      }
    }
    if (iMin < 0) {
      outX.push(x[lo]);
      outY.push(null);
      continue;
    }
    const first = Math.min(iMin, iMax);
    const second = Math.max(iMin, iMax);
    outX.push(x[first]);
    outY.push(y[first]);
    if (second !== first) {
      outX.push(x[second]);
      outY.push(y[second]);
    }
    if (gap >= 0) {
      outX.push(x[gap]);
      outY.push(null);
      // keep x sorted: a gap marker placed out of order is moved into place
      if (gap < second) {
        const k = outX.length - 1;
        const gx = outX[k];
        let j = k;
        while (j > 0 && outX[j - 1] > gx) {
          outX[j] = outX[j - 1];
          outY[j] = outY[j - 1];
          j--;
        }
        outX[j] = gx;
        outY[j] = null;
      }
    }
  }
  return { x: outX, y: outY, nonFinite };
}

/**
 * Bucket-max decimation for several series sharing x (gradient norms: the
 * largest value in a bucket is the one worth seeing). `positive` drops values
 * that a log scale cannot show.
 */
export function decimateMax(
  x: ArrayLike<number>,
  ys: ArrayLike<number>[],
  buckets: number,
  positive = false
): { x: number[]; ys: (number | null)[][] } {
  const n = Math.min(x.length, ...ys.map(y => y.length));
  const size = Math.max(1, n / Math.max(1, buckets));
  const outX: number[] = [];
  const outYs: (number | null)[][] = ys.map(() => []);
  for (let lo = 0, b = 0; lo < n; b++, lo = Math.floor(b * size)) {
    const hi = Math.min(n, Math.floor((b + 1) * size));
    outX.push(x[lo]);
    ys.forEach((y, k) => {
      let best: number | null = null;
      for (let i = lo; i < Math.max(hi, lo + 1); i++) {
        const v = y[i];
        if (
          Number.isFinite(v) &&
          (!positive || v > 0) &&
          (best === null || v > best)
        ) {
          best = v;
        }
      }
      outYs[k].push(best);
    });
  }
  return { x: outX, ys: outYs };
}
