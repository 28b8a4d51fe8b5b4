/**
 * A ring's points as a line chart draws them: decimated incrementally (only
 * the points new since the last draw) and, when smoothing is on, with the
 * EMA of the same points as a second series.
 */
import type uPlot from 'uplot';

import { SeriesRing } from '../model/ringbuffer';
import { MinMaxDecimator } from './minMaxDecimator';
import { Ema } from './smoothing';

/** uPlot draws a gap at null, not at NaN. */
export function withGaps(y: Float64Array): Float64Array | (number | null)[] {
  for (let i = 0; i < y.length; i++) {
    if (Number.isNaN(y[i])) {
      return Array.from(y, v => (Number.isNaN(v) ? null : v));
    }
  }
  return y;
}

/** The decimation and smoothing state kept between draws of one ring. */
export class RingData {
  /** Decimate from scratch at the next draw (the plot was rebuilt). */
  resetDecimation(): void {
    this._decimator = null;
  }

  /** Forget everything (another ring, or another smoothing weight). */
  reset(): void {
    this._decimator = null;
    this._smoothed = null;
  }

  /**
   * The ring's data in `buckets` buckets: [x, y] or, with `smooth` (an EMA
   * weight, 0: off), [x, y, smoothed y]. `log` leaves out values <= 0.
   */
  data(
    ring: SeriesRing,
    buckets: number,
    log: boolean,
    smooth: number
  ): uPlot.AlignedData {
    if (
      !this._decimator ||
      this._decimator.buckets !== buckets ||
      this._decimator.positive !== log
    ) {
      this._decimator = new MinMaxDecimator(buckets, log);
    }
    const view = ring.view();
    const d = this._decimator.update(view);
    const n = d.length;
    const x = d.x.subarray(0, n);
    const y = withGaps(d.y.subarray(0, n));
    if (!smooth) {
      return [x, y];
    }
    // the smoothed values of the same points: point i at [i % capacity]
    let s = this._smoothed;
    if (!s || s.values.length !== ring.capacity || ring.total < s.seen) {
      s = {
        values: new Float32Array(ring.capacity),
        seen: 0,
        ema: new Ema(smooth)
      };
      this._smoothed = s;
    }
    const cap = s.values.length;
    for (let i = Math.max(s.seen, view.first); i < ring.total; i++) {
      s.values[i % cap] = s.ema.push(view.y[i - view.first]);
    }
    s.seen = ring.total;
    const smoothed = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const v = s.values[d.index[i] % cap];
      smoothed[i] = Number.isNaN(d.y[i]) || (log && v <= 0) ? NaN : v;
    }
    return [x, y, withGaps(smoothed)];
  }

  private _decimator: MinMaxDecimator | null = null;
  private _smoothed: {
    values: Float32Array;
    seen: number;
    ema: Ema;
  } | null = null;
}
