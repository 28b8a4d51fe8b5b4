/**
 * A fixed-capacity ring of (x, y) points for one series. Appending is O(1) per
 * point; the oldest points fall off once the capacity is reached, so a run of any
 * length uses bounded browser memory.
 */
export class SeriesRing {
  constructor(capacity: number) {
    this._x = new Float64Array(capacity);
    this._y = new Float32Array(capacity);
  }

  /** Maximum points kept. */
  get capacity(): number {
    return this._x.length;
  }

  /** Points currently held. */
  get length(): number {
    return this._len;
  }

  /** Total points ever appended (including ones that fell off). */
  get total(): number {
    return this._total;
  }

  /** The most recent y value, or NaN when empty. */
  get last(): number {
    if (this._len === 0) {
      return NaN;
    }
    const i = (this._start + this._len - 1) % this.capacity;
    return this._y[i];
  }

  /** The most recent x value, or NaN when empty. */
  get lastX(): number {
    if (this._len === 0) {
      return NaN;
    }
    const i = (this._start + this._len - 1) % this.capacity;
    return this._x[i];
  }

  clear(): void {
    this._start = 0;
    this._len = 0;
    this._total = 0;
  }

  push(xs: ArrayLike<number>, ys: ArrayLike<number>): void {
    const cap = this.capacity;
    const n = xs.length;
    // Only the last `cap` points of a huge batch can survive.
    const from = Math.max(0, n - cap);
    for (let i = from; i < n; i++) {
      const end = (this._start + this._len) % cap;
      this._x[end] = xs[i];
      this._y[end] = ys[i];
      if (this._len < cap) {
        this._len++;
      } else {
        this._start = (this._start + 1) % cap;
      }
    }
    this._total += n;
  }

  /** Copy the held points, oldest first. */
  toArrays(): { x: Float64Array; y: Float32Array } {
    const x = new Float64Array(this._len);
    const y = new Float32Array(this._len);
    const cap = this.capacity;
    const firstPart = Math.min(this._len, cap - this._start);
    x.set(this._x.subarray(this._start, this._start + firstPart));
    y.set(this._y.subarray(this._start, this._start + firstPart));
    if (firstPart < this._len) {
      x.set(this._x.subarray(0, this._len - firstPart), firstPart);
      y.set(this._y.subarray(0, this._len - firstPart), firstPart);
    }
    return { x, y };
  }

  private _x: Float64Array;
  private _y: Float32Array;
  private _start = 0;
  private _len = 0;
  private _total = 0;
}
