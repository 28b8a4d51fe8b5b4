import { themeVar } from './lineChart';

/**
 * A layer × step heatmap of gradient norms on a canvas: one row per layer,
 * one column per pixel (bucket max over the steps it covers), colour by
 * log10(norm). Non-finite cells are drawn in the error colour. Redraws at
 * most once per animation frame.
 */
export class Heatmap {
  constructor(options: Heatmap.IOptions = {}) {
    this.node = document.createElement('canvas');
    this.node.className = 'jp-TorchDbg-heatmap';
    this._rowHeight = options.rowHeight ?? 4;
    this.node.addEventListener('mousemove', e => this._hover(e));
  }

  readonly node: HTMLCanvasElement;

  /** Called with (row, step, value) under the mouse, or null. */
  onHover:
    ((hit: { row: number; x: number; value: number } | null) => void) | null =
    null;

  setData(x: ArrayLike<number>, rows: ArrayLike<number>[]): void {
    this._x = x;
    this._rows = rows;
    if (this._frame === null) {
      this._frame = requestAnimationFrame(() => {
        this._frame = null;
        this._draw();
      });
    }
  }

  /** log10 range of the colour scale at the last draw. */
  get range(): [number, number] {
    return [this._lo, this._hi];
  }

  dispose(): void {
    if (this._frame !== null) {
      cancelAnimationFrame(this._frame);
    }
  }

  private _draw(): void {
    const width = this.node.parentElement?.clientWidth ?? 0;
    const rows = this._rows.length;
    if (width <= 0 || rows === 0) {
      return;
    }
    const rh = Math.max(
      2,
      Math.min(this._rowHeight, Math.floor(240 / rows)) || 2
    );
    const height = rows * rh;
    const dpr = devicePixelRatio || 1;
    this.node.width = Math.floor(width * dpr);
    this.node.height = Math.floor(height * dpr);
    this.node.style.width = `${width}px`;
    this.node.style.height = `${height}px`;
    this._rh = rh;
    const ctx = this.node.getContext('2d');
    if (!ctx) {
      return;
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = themeVar('--jp-layout-color2', '#eeeeee');
    ctx.fillRect(0, 0, width, height);
    const n = Math.min(this._x.length, ...this._rows.map(r => r.length));
    if (n === 0) {
      return;
    }
    const cols = Math.min(width, n);
    const colW = width / cols;
    // log10 range over all finite positive values
    let lo = Infinity;
    let hi = -Infinity;
    const cells: Float64Array[] = this._rows.map(row => {
      const out = new Float64Array(cols);
      for (let c = 0; c < cols; c++) {
        const a = Math.floor((c * n) / cols);
        const b = Math.max(a + 1, Math.floor(((c + 1) * n) / cols));
        let best = -Infinity;
        let bad = false;
        for (let i = a; i < b; i++) {
          const v = row[i];
          if (!Number.isFinite(v)) {
            bad = true;
          } else if (v > best) {
            best = v;
          }
        }
        const lv = bad ? NaN : best > 0 ? Math.log10(best) : -Infinity;
        out[c] = lv;
        if (Number.isFinite(lv)) {
          lo = Math.min(lo, lv);
          hi = Math.max(hi, lv);
        }
      }
      return out;
    });
    this._lo = lo;
    this._hi = hi;
    this._cols = cols;
    this._n = n;
    const span = hi > lo ? hi - lo : 1;
    const bad = themeVar('--jp-error-color1', '#d32f2f');
    cells.forEach((row, r) => {
      for (let c = 0; c < cols; c++) {
        const v = row[c];
        if (Number.isNaN(v)) {
          ctx.fillStyle = bad;
        } else if (v === -Infinity) {
          continue; // zero gradient: background
        } else {
          ctx.fillStyle = viridis((v - lo) / span);
        }
        ctx.fillRect(c * colW, r * rh, Math.ceil(colW), rh);
      }
    });
  }

  private _hover(e: MouseEvent): void {
    if (!this.onHover || !this._n) {
      return;
    }
    const rect = this.node.getBoundingClientRect();
    const row = Math.floor((e.clientY - rect.top) / this._rh);
    const col = Math.floor(((e.clientX - rect.left) / rect.width) * this._cols);
    if (row < 0 || row >= this._rows.length || col < 0 || col >= this._cols) {
      this.onHover(null);
      return;
    }
    const i = Math.min(this._n - 1, Math.floor((col * this._n) / this._cols));
    this.onHover({ row, x: this._x[i], value: this._rows[row][i] });
  }

  private _x: ArrayLike<number> = [];
  private _rows: ArrayLike<number>[] = [];
  private _rowHeight: number;
  private _rh = 4;
  private _cols = 0;
  private _n = 0;
  private _lo = 0;
  private _hi = 0;
  private _frame: number | null = null;
}

export namespace Heatmap {
  export interface IOptions {
    rowHeight?: number;
  }
}

/** A compact viridis approximation (perceptually ordered; reads in both themes). */
export function viridis(t: number): string {
  const stops = [
    [68, 1, 84],
    [59, 82, 139],
    [33, 145, 140],
    [94, 201, 98],
    [253, 231, 37]
  ];
  const u = Math.max(0, Math.min(1, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(u));
  const f = u - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}
