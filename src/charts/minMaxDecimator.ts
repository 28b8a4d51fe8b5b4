import { bucketSizeFor, IAlignedDecimated, IRingView } from './aligned';

/** Kept state of one bucket (parallel arrays in `MinMaxDecimator`). */
class Buckets {
  constructor(size: number) {
    this.key = new Float64Array(size);
    this.x0 = new Float64Array(size);
    this.iMin = new Float64Array(size);
    this.vMin = new Float64Array(size);
    this.xMin = new Float64Array(size);
    this.iMax = new Float64Array(size);
    this.vMax = new Float64Array(size);
    this.xMax = new Float64Array(size);
    this.gap = new Float64Array(size);
    this.xGap = new Float64Array(size);
    this.nf = new Float64Array(size);
  }
  key: Float64Array;
  x0: Float64Array;
  iMin: Float64Array;
  vMin: Float64Array;
  xMin: Float64Array;
  iMax: Float64Array;
  vMax: Float64Array;
  xMax: Float64Array;
  gap: Float64Array;
  xGap: Float64Array;
  nf: Float64Array;
}

/** Incremental min/max decimation of a growing, sliding ring (see `decimateAligned`). */
export class MinMaxDecimator {
  /** At most `buckets` buckets (about two points per pixel at one per pixel). */
  constructor(buckets: number, positive = false) {
    this._target = Math.max(2, Math.floor(buckets));
    this._positive = positive;
    this._b = new Buckets(this._target + 2);
    this._out = {
      x: new Float64Array(3 * (this._target + 2)),
      y: new Float64Array(3 * (this._target + 2)),
      index: new Float64Array(3 * (this._target + 2)),
      length: 0,
      nonFinite: 0
    };
  }

  /** Points per bucket now (a power of two; doubles as the ring fills). */
  get size(): number {
    return this._size;
  }

  get buckets(): number {
    return this._target;
  }

  get positive(): boolean {
    return this._positive;
  }

  /** Forget everything (the next update starts from scratch). */
  reset(): void {
    this._len = 0;
    this._seen = -1;
    this._first = -1;
  }

  /**
   * Take in the points of `view` not seen yet (and drop those that fell off
   * the front); returns the output, valid until the next update.
   */
  update(view: IRingView): IAlignedDecimated {
    const n = view.x.length;
    const first = view.first;
    const end = first + n;
    if (this._seen < 0 || end < this._seen || first < this._first) {
      // new data (cleared, replaced): start over
      this._len = 0;
      this._size = bucketSizeFor(n, this._target);
      this._seen = first;
    }
    const b = this._b;
    const s = this._size;
    // drop buckets that fell off the front
    let drop = 0;
    while (drop < this._len && (b.key[drop] + 1) * s <= first) {
      drop++;
    }
    this._shift(drop);
    // the first bucket lost points: compute it again from what is held
    if (this._len > 0 && first > this._first && b.key[0] * s < first) {
      const hi = Math.min(end, (b.key[0] + 1) * s, this._seen);
      this._init(0, b.key[0]);
      for (let i = first; i < hi; i++) {
        this._add(0, i, view.x[i - first], view.y[i - first]);
      }
    }
    this._first = first;
    for (let i = Math.max(this._seen, first); i < end; i++) {
      const key = Math.floor(i / this._size);
      let slot = this._len - 1;
      if (slot < 0 || b.key[slot] !== key) {
        if (this._len >= this._target) {
          this._halve();
          i--; // this point again, with the bigger buckets
          continue;
        }
        slot = this._len++;
        this._init(slot, key);
      }
      this._add(slot, i, view.x[i - first], view.y[i - first]);
    }
    this._seen = end;
    return this._emit();
  }

  private _init(slot: number, key: number): void {
    const b = this._b;
    b.key[slot] = key;
    b.iMin[slot] = -1;
    b.iMax[slot] = -1;
    b.gap[slot] = -1;
    b.nf[slot] = 0;
    b.x0[slot] = NaN;
  }

  private _add(slot: number, i: number, x: number, v: number): void {
    const b = this._b;
    if (Number.isNaN(b.x0[slot])) {
      b.x0[slot] = x;
    }
    if (!Number.isFinite(v)) {
      b.nf[slot]++;
      if (b.gap[slot] < 0) {
        b.gap[slot] = i;
        b.xGap[slot] = x;
      }
      return;
    }
    if (this._positive && v <= 0) {
      return;
    }
    if (b.iMin[slot] < 0 || v < b.vMin[slot]) {
      b.iMin[slot] = i;
      b.vMin[slot] = v;
      b.xMin[slot] = x;
    }
    if (b.iMax[slot] < 0 || v > b.vMax[slot]) {
      b.iMax[slot] = i;
      b.vMax[slot] = v;
      b.xMax[slot] = x;
    }
  }

  /** Double the bucket size: merge neighbours (min/max merge exactly). */
  private _halve(): void {
    const b = this._b;
    this._size *= 2;
    let out = -1;
    for (let k = 0; k < this._len; k++) {
      const key = Math.floor(b.key[k] / 2);
      if (out >= 0 && b.key[out] === key) {
        // merge k into out (out holds the earlier points)
        if (b.iMin[k] >= 0 && (b.iMin[out] < 0 || b.vMin[k] < b.vMin[out])) {
          b.iMin[out] = b.iMin[k];
          b.vMin[out] = b.vMin[k];
          b.xMin[out] = b.xMin[k];
        }
        if (b.iMax[k] >= 0 && (b.iMax[out] < 0 || b.vMax[k] > b.vMax[out])) {
          b.iMax[out] = b.iMax[k];
          b.vMax[out] = b.vMax[k];
          b.xMax[out] = b.xMax[k];
        }
        if (b.gap[out] < 0 && b.gap[k] >= 0) {
          b.gap[out] = b.gap[k];
          b.xGap[out] = b.xGap[k];
        }
        b.nf[out] += b.nf[k];
        if (Number.isNaN(b.x0[out])) {
          b.x0[out] = b.x0[k];
        }
      } else {
        out++;
        this._copy(k, out);
        b.key[out] = key;
      }
    }
    this._len = out + 1;
  }

  private _copy(from: number, to: number): void {
    if (from === to) {
      return;
    }
    const b = this._b;
    for (const a of [
      b.key,
      b.x0,
      b.iMin,
      b.vMin,
      b.xMin,
      b.iMax,
      b.vMax,
      b.xMax,
      b.gap,
      b.xGap,
      b.nf
    ]) {
      a[to] = a[from];
    }
  }

  private _shift(drop: number): void {
    if (drop <= 0) {
      return;
    }
    for (let k = drop; k < this._len; k++) {
      this._copy(k, k - drop);
    }
    this._len -= drop;
  }

  private _emit(): IAlignedDecimated {
    const b = this._b;
    const o = this._out;
    let m = 0;
    let nonFinite = 0;
    const put = (i: number, x: number, y: number) => {
      o.index[m] = i;
      o.x[m] = x;
      o.y[m] = y;
      m++;
    };
    for (let k = 0; k < this._len; k++) {
      nonFinite += b.nf[k];
      const gap = b.gap[k];
      if (b.iMin[k] < 0) {
        put(
          gap >= 0 ? gap : b.key[k] * this._size,
          gap >= 0 ? b.xGap[k] : b.x0[k],
          NaN
        );
        continue;
      }
      const minFirst = b.iMin[k] <= b.iMax[k];
      const pts: [number, number, number][] = [
        minFirst
          ? [b.iMin[k], b.xMin[k], b.vMin[k]]
          : [b.iMax[k], b.xMax[k], b.vMax[k]]
      ];
      if (b.iMin[k] !== b.iMax[k]) {
        pts.push(
          minFirst
            ? [b.iMax[k], b.xMax[k], b.vMax[k]]
            : [b.iMin[k], b.xMin[k], b.vMin[k]]
        );
      }
      if (gap >= 0) {
        const at = pts.findIndex(p => p[0] > gap);
        pts.splice(at < 0 ? pts.length : at, 0, [gap, b.xGap[k], NaN]);
      }
      for (const p of pts) {
        put(p[0], p[1], p[2]);
      }
    }
    o.length = m;
    o.nonFinite = nonFinite;
    return o;
  }

  private _target: number;
  private _positive: boolean;
  private _size = 1;
  private _b: Buckets;
  private _len = 0;
  /** Number of the next point not taken in yet (-1: nothing yet). */
  private _seen = -1;
  /** `first` of the last update. */
  private _first = -1;
  private _out: IAlignedDecimated;
}
