/** TensorBoard's default smoothing weight when smoothing is turned on. */
export const DEFAULT_SMOOTHING = 0.6;

/**
 * TensorBoard's exponential moving average (debiased, so the start is not
 * pulled toward 0): `last = w * last + (1 - w) * v`, shown as
 * `last / (1 - w^k)` after k finite values. Non-finite values pass through
 * and do not move the average. Incremental: feed values one at a time.
 */
export class Ema {
  constructor(readonly weight: number) {}

  push(v: number): number {
    if (!Number.isFinite(v)) {
      return v;
    }
    const w = this.weight;
    this._last = this._last * w + (1 - w) * v;
    this._debias = this._debias * w + (1 - w);
    return this._last / this._debias;
  }

  reset(): void {
    this._last = 0;
    this._debias = 0;
  }

  private _last = 0;
  private _debias = 0;
}

/** `Ema` over a whole array (for tests and one-off use). */
export function smoothEma(ys: ArrayLike<number>, weight: number): Float64Array {
  const ema = new Ema(weight);
  const out = new Float64Array(ys.length);
  for (let i = 0; i < ys.length; i++) {
    out[i] = ema.push(ys[i]);
  }
  return out;
}
