/**
 * A fixed-capacity window of (x, y) points for one series. Appending is O(1)
 * amortised per point; the oldest points fall off once the capacity is
 * reached, so a run of any length uses bounded browser memory.
 *
 * The held points always lie contiguously in the backing typed arrays (a
 * sliding window with some slack: when the slack is used up the window is
 * moved back to the start, about every capacity/4 points), so `view()` hands
 * them out as typed-array views without copying. Storage grows with the points
 * held, up to 1.25 × the capacity.
 */
export class SeriesRing {
  constructor(capacity: number) {
    this._cap = Math.max(1, Math.floor(capacity));
    this._max = this._cap + Math.max(64, Math.ceil(this._cap / 4));
    const initial = Math.min(this._max, 256);
    this._x = new Float64Array(initial);
    this._y = new Float32Array(initial);
  }

  /** Maximum points kept. */
  get capacity(): number {
    return this._cap;
  }

  /** Points currently held. */
  get length(): number {
    return this._len;
  }

  /** Total points ever appended (including ones that fell off). */
  get total(): number {
    return this._total;
  }

  /**
   * Absolute index (counted from the first point ever appended, as `total`)
   * of the oldest point held: point `i` of `view()` is point `first + i`.
   */
  get first(): number {
    return this._total - this._len;
  }

  /** The most recent y value, or NaN when empty. */
  get last(): number {
    return this._len === 0 ? NaN : this._y[this._start + this._len - 1];
  }

  /** The most recent x value, or NaN when empty. */
  get lastX(): number {
    return this._len === 0 ? NaN : this._x[this._start + this._len - 1];
  }

  clear(): void {
    this._start = 0;
    this._len = 0;
    this._total = 0;
  }

  push(xs: ArrayLike<number>, ys: ArrayLike<number>): void {
    const cap = this._cap;
    const n = xs.length;
    // Only the last `cap` points of a huge batch can survive.
    const from = Math.max(0, n - cap);
    for (let i = from; i < n; i++) {
      let end = this._start + this._len;
      if (end === this._x.length) {
        this._makeRoom();
        end = this._start + this._len;
      }
      this._x[end] = xs[i];
      this._y[end] = ys[i];
      if (this._len < cap) {
        this._len++;
      } else {
        this._start++;
      }
    }
    this._total += n;
  }

  /**
   * The held points, oldest first, as views of the backing arrays (no copy).
   * Valid until the next `push` or `clear`: read them, do not keep them.
   */
  view(): { x: Float64Array; y: Float32Array; first: number } {
    const a = this._start;
    const b = a + this._len;
    return {
      x: this._x.subarray(a, b),
      y: this._y.subarray(a, b),
      first: this.first
    };
  }

  /** Copy the held points, oldest first. */
  toArrays(): { x: Float64Array; y: Float32Array } {
    const v = this.view();
    return { x: v.x.slice(), y: v.y.slice() };
  }

  /** The backing arrays are full at the end: grow them, or slide the window back. */
  private _makeRoom(): void {
    const size = this._x.length;
    if (size < this._max) {
      const bigger = Math.min(this._max, size * 2);
      const x = new Float64Array(bigger);
      const y = new Float32Array(bigger);
      x.set(this._x.subarray(this._start, this._start + this._len));
      y.set(this._y.subarray(this._start, this._start + this._len));
      this._x = x;
      this._y = y;
    } else {
      this._x.copyWithin(0, this._start, this._start + this._len);
      this._y.copyWithin(0, this._start, this._start + this._len);
    }
    this._start = 0;
  }

  private _cap: number;
  private _max: number;
  private _x: Float64Array;
  private _y: Float32Array;
  private _start = 0;
  private _len = 0;
  private _total = 0;
}
