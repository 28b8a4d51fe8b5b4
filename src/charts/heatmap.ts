import { formatTick } from './axes';
import { FrameScheduler, frames } from './frame';
import { themeVar } from './theme';

/** The heatmap is never shorter than this (readable with one or two layers). */
export const HEATMAP_MIN_HEIGHT = 60;

/**
 * A layer × step heatmap of gradient norms on a canvas: one row per layer,
 * one column per pixel (bucket max over the steps it covers), colour by
 * log10(norm), with a colour scale under it (the min and max norm at its
 * ends). Non-finite cells are drawn in the error colour. At least
 * `HEATMAP_MIN_HEIGHT` px tall. Drawn in the shared animation frame, only
 * while in view.
 */
export class Heatmap {
  constructor(options: Heatmap.IOptions = {}) {
    this.node = document.createElement('div');
    this.node.className = 'jp-TorchDbg-heatWrap';
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'jp-TorchDbg-heatmap';
    this.node.appendChild(this.canvas);
    const scale = document.createElement('div');
    scale.className = 'jp-TorchDbg-heatScale';
    this._loLabel = document.createElement('span');
    this._loLabel.className = 'jp-TorchDbg-heatScaleMin';
    this._bar = document.createElement('canvas');
    this._bar.width = 64;
    this._bar.height = 1;
    this._hiLabel = document.createElement('span');
    this._hiLabel.className = 'jp-TorchDbg-heatScaleMax';
    this._badKey = document.createElement('span');
    this._badKey.className = 'jp-TorchDbg-heatScaleBad';
    this._badLabel = document.createElement('span');
    scale.append(
      this._loLabel,
      this._bar,
      this._hiLabel,
      this._badKey,
      this._badLabel
    );
    this.scale = scale;
    this.node.appendChild(scale);
    this._rowHeight = options.rowHeight ?? 4;
    this._labels = {
      title: options.scaleTitle ?? 'colour: log10 of the norm',
      nonFinite: options.nonFiniteLabel ?? 'non-finite'
    };
    scale.title = this._labels.title;
    this._badLabel.textContent = this._labels.nonFinite;
    this._paintBar();
    this.canvas.addEventListener('mousemove', e => this._hover(e));
    this._frame = (options.scheduler ?? frames).add(this.node, () =>
      this._draw()
    );
  }

  /** The element to mount: the heatmap canvas and its colour scale. */
  readonly node: HTMLDivElement;
  /** The heatmap itself. */
  readonly canvas: HTMLCanvasElement;
  /** The colour scale under it (min label, gradient, max label). */
  readonly scale: HTMLDivElement;

  /** Called with (row, step, value) under the mouse, or null. */
  onHover:
    ((hit: { row: number; x: number; value: number } | null) => void) | null =
    null;

  setData(x: ArrayLike<number>, rows: ArrayLike<number>[]): void {
    this._source = null;
    this._x = x;
    this._rows = rows;
    this._frame.markDirty();
  }

  /** Rows read at draw time (e.g. ring views: no copy, never stale). */
  setSource(
    get: () => { x: ArrayLike<number>; rows: ArrayLike<number>[] } | null
  ): void {
    this._source = get;
    this._frame.markDirty();
  }

  /** log10 range of the colour scale at the last draw. */
  get range(): [number, number] {
    return [this._lo, this._hi];
  }

  dispose(): void {
    this._frame.dispose();
  }

  private _paintBar(): void {
    const ctx = this._bar.getContext('2d');
    if (!ctx) {
      return;
    }
    for (let i = 0; i < this._bar.width; i++) {
      ctx.fillStyle = viridis(i / (this._bar.width - 1));
      ctx.fillRect(i, 0, 1, 1);
    }
  }

  /** Draw now; false when there is nothing to draw (no width, no rows). */
  private _draw(): boolean {
    const width = this.node.parentElement?.clientWidth ?? 0;
    if (this._source && width > 0) {
      const got = this._source();
      this._x = got?.x ?? [];
      this._rows = got?.rows ?? [];
    }
    const rows = this._rows.length;
    if (width <= 0 || rows === 0) {
      return false;
    }
    const rh =
      Math.max(
        HEATMAP_MIN_HEIGHT,
        rows *
          Math.max(2, Math.min(this._rowHeight, Math.floor(240 / rows)) || 2)
      ) / rows;
    const height = Math.round(rows * rh);
    const dpr = devicePixelRatio || 1;
    this.canvas.width = Math.floor(width * dpr);
    this.canvas.height = Math.floor(height * dpr);
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    this._rh = rh;
    const ctx = this.canvas.getContext('2d');
    if (!ctx) {
      return false;
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = themeVar('--jp-layout-color2', '#eeeeee');
    ctx.fillRect(0, 0, width, height);
    const n = Math.min(this._x.length, ...this._rows.map(r => r.length));
    if (n === 0) {
      this._setScale(NaN, NaN, false);
      return true;
    }
    const cols = Math.min(width, n);
    const colW = width / cols;
    // log10 range over all finite positive values
    let lo = Infinity;
    let hi = -Infinity;
    let anyBad = false;
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
        anyBad = anyBad || bad;
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
    this._setScale(lo, hi, anyBad);
    const span = hi > lo ? hi - lo : 1;
    const bad = themeVar('--jp-error-color1', '#d32f2f');
    cells.forEach((row, r) => {
      const y0 = Math.round(r * rh);
      const y1 = Math.round((r + 1) * rh);
      for (let c = 0; c < cols; c++) {
        const v = row[c];
        if (Number.isNaN(v)) {
          ctx.fillStyle = bad;
        } else if (v === -Infinity) {
          continue; // zero gradient: background
        } else {
          ctx.fillStyle = viridis((v - lo) / span);
        }
        ctx.fillRect(c * colW, y0, Math.ceil(colW), y1 - y0);
      }
    });
    return true;
  }

  /** The scale's end labels: the norms at the two ends of the colours. */
  private _setScale(lo: number, hi: number, bad: boolean): void {
    const ok = Number.isFinite(lo) && Number.isFinite(hi);
    const short = (v: number) => formatTick(Number(v.toPrecision(3)));
    const lv = ok ? short(10 ** lo) : '–';
    const hv = ok ? short(10 ** hi) : '–';
    if (this._loLabel.textContent !== lv) {
      this._loLabel.textContent = lv;
    }
    if (this._hiLabel.textContent !== hv) {
      this._hiLabel.textContent = hv;
    }
    const show = bad ? '' : 'none';
    this._badKey.style.display = show;
    this._badLabel.style.display = show;
  }

  private _hover(e: MouseEvent): void {
    if (!this.onHover || !this._n) {
      return;
    }
    const rect = this.canvas.getBoundingClientRect();
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
  private _source:
    (() => { x: ArrayLike<number>; rows: ArrayLike<number>[] } | null) | null =
    null;
  private _rowHeight: number;
  private _rh = 4;
  private _cols = 0;
  private _n = 0;
  private _lo = 0;
  private _hi = 0;
  private _frame: FrameScheduler.IHandle;
  private _loLabel: HTMLSpanElement;
  private _hiLabel: HTMLSpanElement;
  private _bar: HTMLCanvasElement;
  private _badKey: HTMLSpanElement;
  private _badLabel: HTMLSpanElement;
  private _labels: { title: string; nonFinite: string };
}

export namespace Heatmap {
  export interface IOptions {
    /** Preferred row height in px (rows grow to fill the minimum height). */
    rowHeight?: number;
    /** Tooltip of the colour scale (translated by the caller). */
    scaleTitle?: string;
    /** Label of the non-finite colour key (translated by the caller). */
    nonFiniteLabel?: string;
    /** The frame scheduler (default the shared `frames`). */
    scheduler?: FrameScheduler;
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
