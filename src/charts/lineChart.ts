import uPlot from 'uplot';

import { SeriesRing } from '../model/ringbuffer';
import { decimateMax, decimateMinMax, MinMaxDecimator } from './decimate';
import { FrameScheduler, frames } from './frame';

/** Read a JupyterLab theme variable (falls back when unset, e.g. in tests). */
export function themeVar(name: string, fallback: string): string {
  const v = getComputedStyle(document.body).getPropertyValue(name).trim();
  return v || fallback;
}

/** Short y-axis labels: 1e+16 rather than 10,000,000,000,000,000. */
export function formatTick(v: number): string {
  if (v === null || !Number.isFinite(v)) {
    return '';
  }
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) {
    return v.toExponential(0);
  }
  return String(Number(v.toPrecision(4)));
}

/** x ticks of a time axis (Unix seconds) as a one-line clock time: 14:03:25. */
export function clockTime(v: number): string {
  if (v === null || !Number.isFinite(v)) {
    return '';
  }
  return new Date(v * 1000).toLocaleTimeString([], {
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    hour12: false
  });
}

/**
 * Line colours that read on light and dark backgrounds, 8 distinct hues:
 * JupyterLab's status colours (not --jp-accent-color1, the same green as
 * --jp-success-color1 in both themes), then mid-tone material colours
 * (defined the same in both themes).
 */
export const SERIES_PALETTE: readonly (readonly [string, string])[] = [
  ['--jp-brand-color1', '#1976d2'],
  ['--jp-warn-color1', '#f57c00'],
  ['--jp-success-color1', '#388e3c'],
  ['--jp-error-color1', '#d32f2f'],
  ['--jp-info-color1', '#0097a7'],
  ['--md-purple-400', '#ab47bc'],
  ['--md-pink-400', '#ec407a'],
  ['--md-brown-400', '#8d6e63']
];

export function seriesColor(i: number): string {
  const [name, fallback] = SERIES_PALETTE[i % SERIES_PALETTE.length];
  return themeVar(name, fallback);
}

/** The line of the run compared with: the theme's strong text colour (reads on both). */
export function compareColor(): string {
  return themeVar('--jp-ui-font-color1', '#424242');
}

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

/**
 * An earlier run drawn dashed under the shown one: faded (every earlier run,
 * the "earlier runs faded" toggle), or the one run picked to compare with
 * (`compare`: drawn stronger, named in the legend, and always inside the y
 * range).
 */
export interface IOverlay {
  label: string;
  x: ArrayLike<number>;
  y: ArrayLike<number>;
  compare?: boolean;
}

/** uPlot draws a gap at null, not at NaN. */
function withGaps(y: Float64Array): Float64Array | (number | null)[] {
  for (let i = 0; i < y.length; i++) {
    if (Number.isNaN(y[i])) {
      return Array.from(y, v => (Number.isNaN(v) ? null : v));
    }
  }
  return y;
}

/**
 * A live line chart drawn with uPlot on a canvas: one series (min/max
 * decimated, spikes kept) or several sharing x (bucket-max decimated).
 *
 * Setting data only stores it and marks the chart dirty: the charts share one
 * animation frame (`frames`), and a chart out of view (scrolled away, or the
 * panel hidden) is not drawn until it comes into view. A ring given with
 * `setRing` is read in place (no copy) and decimated incrementally: only the
 * points new since the last draw. Options at run time: log-y (`setLog`),
 * EMA smoothing with the raw line kept faint (`setSmoothing`), faded overlays
 * of earlier runs (`setOverlays`), a horizontal threshold line and a vertical
 * marker.
 */
export class LineChart {
  constructor(options: LineChart.IOptions) {
    this.node = document.createElement('div');
    this.node.className = 'jp-TorchDbg-chart';
    this._options = options;
    this._log = !!options.log;
    this._frame = (options.scheduler ?? frames).add(
      this.node,
      () => this._draw(),
      visible => this.onVisibilityChange?.(visible)
    );
    this._resizeObserver = new ResizeObserver(() => this._onResize());
    this._resizeObserver.observe(this.node);
    // JupyterLab marks the body once a theme's CSS is applied: rebuild with its colours.
    this._themeObserver = new MutationObserver(() => this.refreshTheme());
    this._themeObserver.observe(document.body, {
      attributes: true,
      attributeFilter: ['data-jp-theme-name', 'data-jp-theme-light']
    });
  }

  readonly node: HTMLDivElement;

  /**
   * Called when the chart comes into view or goes out of it (scrolled, or
   * the panel shown or hidden): lets a card skip updates no one sees.
   */
  onVisibilityChange: ((visible: boolean) => void) | null = null;

  /** In view at the last report (always true without IntersectionObserver). */
  get visible(): boolean {
    return this._frame.visible;
  }

  /** Points drawn at the last redraw (after decimation). */
  get drawnPoints(): number {
    return this._drawn;
  }

  /** Times the data was decimated and handed to uPlot. */
  get draws(): number {
    return this._draws;
  }

  /** Log-scale y (non-positive values are not drawn). */
  get log(): boolean {
    return this._log;
  }

  /** The smoothing weight in use, or 0 (off). */
  get smoothing(): number {
    return this._smooth;
  }

  /** Replace the data (one y array per series); draws in the next frame. */
  setData(x: ArrayLike<number>, ...ys: ArrayLike<number>[]): void {
    this._ring = null;
    this._source = null;
    this._x = x;
    this._ys = ys;
    this._dataDirty = true;
    this._frame.markDirty();
  }

  /**
   * Several series sharing x, read at draw time (e.g. ring views: no copy,
   * never stale): `get` is called in the frame that draws the chart.
   */
  setSource(
    get: () => { x: ArrayLike<number>; ys: ArrayLike<number>[] } | null
  ): void {
    this._ring = null;
    this._source = get;
    this._dataDirty = true;
    this._frame.markDirty();
  }

  /**
   * Draw one series straight from its ring: read in place at draw time and
   * decimated incrementally. Call again (same ring) when points were added.
   */
  setRing(ring: SeriesRing): void {
    if (ring !== this._ring) {
      this._decimator = null;
      this._smoothed = null;
    }
    this._ring = ring;
    this._source = null;
    this._ys = [];
    this._dataDirty = true;
    this._frame.markDirty();
  }

  /** Turn log-scale y on or off (values <= 0 are then left out). */
  setLog(on: boolean): void {
    if (on !== this._log) {
      this._log = on;
      this._rebuild();
    }
  }

  /**
   * Smooth the single series with `Ema` of this weight (0 < w < 1; 0 or null:
   * off), drawn over the raw line, which stays faint. Multi-series charts
   * ignore it.
   */
  setSmoothing(weight: number | null): void {
    const w = weight && weight > 0 && weight < 1 ? weight : 0;
    if (w !== this._smooth) {
      this._smooth = w;
      this._smoothed = null;
      this._rebuild();
    }
  }

  /**
   * Earlier runs, drawn dashed under the current series (none: []), with a
   * legend under the chart naming them and `shown` (the solid line's label,
   * e.g. "run 3"); `faded` words the faded runs' entry (translated by the
   * caller: "run 1, run 2 (faded)").
   */
  setOverlays(
    overlays: ReadonlyArray<IOverlay>,
    shown?: string,
    faded: (runs: string) => string = runs => `${runs} (faded)`
  ): void {
    this._overlays = overlays.map(o => {
      const d = decimateMinMax(o.x, o.y, OVERLAY_POINTS);
      return { label: o.label, x: d.x, y: d.y, compare: !!o.compare };
    });
    this._shownLabel = shown ?? this._options.series[0]?.label ?? '';
    this._fadedText = faded;
    this._renderLegend();
    this._rebuild();
  }

  /** The legend under the chart while overlays are drawn (text only). */
  get legend(): HTMLElement {
    return this._legend;
  }

  /** One legend entry: a line sample (solid or dashed) and its label. */
  private _legendItem(
    text: string,
    color: string,
    dashed: boolean,
    kind: string
  ): HTMLElement {
    const item = document.createElement('span');
    item.className = 'jp-TorchDbg-chartLegendItem';
    item.dataset.kind = kind;
    const swatch = document.createElement('span');
    swatch.className = 'jp-TorchDbg-chartLegendLine';
    swatch.style.borderTopColor = color;
    swatch.style.borderTopStyle = dashed ? 'dashed' : 'solid';
    const label = document.createElement('span');
    label.textContent = text;
    item.append(swatch, label);
    return item;
  }

  private _renderLegend(): void {
    const legend = this._legend;
    legend.replaceChildren();
    if (this._overlays.length === 0) {
      legend.remove();
      return;
    }
    const color = this._options.series[0]?.color ?? seriesColor(0);
    legend.append(this._legendItem(this._shownLabel, color, false, 'shown'));
    for (const o of this._overlays.filter(o => o.compare)) {
      legend.append(this._legendItem(o.label, compareColor(), true, 'compare'));
    }
    const faded = this._overlays.filter(o => !o.compare).map(o => o.label);
    if (faded.length) {
      legend.append(
        this._legendItem(
          this._fadedText(faded.join(', ')),
          themeVar('--jp-ui-font-color3', '#9e9e9e'),
          true,
          'faded'
        )
      );
    }
    this.node.appendChild(legend);
  }

  /** A horizontal reference line (e.g. the explosion threshold), or none. */
  setHLine(value: number | null): void {
    if (value !== this._hline) {
      this._hline = value;
      this._frame.markDirty();
    }
  }

  /** A vertical marker at x (e.g. the step of an alarm), or none. */
  setMarker(x: number | null): void {
    if (x !== this._marker) {
      this._marker = x;
      this._frame.markDirty();
    }
  }

  /** Rebuild with the current theme colours (after a theme switch). */
  refreshTheme(): void {
    this._renderLegend();
    this._rebuild();
  }

  dispose(): void {
    this._frame.dispose();
    this._resizeObserver.disconnect();
    this._themeObserver.disconnect();
    this._destroyPlot();
  }

  private _rebuild(): void {
    this._destroyPlot();
    this._decimator = null;
    this._dataDirty = true;
    this._frame.markDirty();
  }

  private _onResize(): void {
    const width = this.node.clientWidth;
    if (width > 0 && width !== this._width) {
      this._width = width;
      if (this._plot) {
        this._plot.setSize({ width, height: this._options.height });
      }
      this._dataDirty = true;
      this._frame.markDirty();
    }
  }

  /** The single ring's data: decimated incrementally, smoothed when on. */
  private _ringData(ring: SeriesRing, buckets: number): uPlot.AlignedData {
    if (
      !this._decimator ||
      this._decimator.buckets !== buckets ||
      this._decimator.positive !== this._log
    ) {
      this._decimator = new MinMaxDecimator(buckets, this._log);
    }
    const view = ring.view();
    const d = this._decimator.update(view);
    const n = d.length;
    const x = d.x.subarray(0, n);
    const y = withGaps(d.y.subarray(0, n));
    if (!this._smooth) {
      return [x, y];
    }
    // the smoothed values of the same points: point i at [i % capacity]
    let s = this._smoothed;
    if (!s || s.values.length !== ring.capacity || ring.total < s.seen) {
      s = {
        values: new Float32Array(ring.capacity),
        seen: 0,
        ema: new Ema(this._smooth)
      };
      this._smoothed = s;
    }
    const cap = s.values.length;
    for (let i = Math.max(s.seen, view.first); i < ring.total; i++) {
      s.values[i % cap] = s.ema.push(view.y[i - view.first]);
    }
    s.seen = ring.total;
    const smooth = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const v = s.values[d.index[i] % cap];
      smooth[i] = Number.isNaN(d.y[i]) || (this._log && v <= 0) ? NaN : v;
    }
    return [x, y, withGaps(smooth)];
  }

  /** Draw now; false when there is nothing to draw (no width, no data). */
  private _draw(): boolean {
    // the width the resize observer saw (reading clientWidth would force a
    // layout: only for a chart in view, never for one merely getting its first draw)
    const width =
      this._width || (this._frame.visible ? this.node.clientWidth : 0);
    const ring = this._ring;
    if (this._source && width > 0 && this._dataDirty) {
      const got = this._source();
      this._x = got?.x ?? [];
      this._ys = got?.ys ?? [];
    }
    if (width <= 0 || (!ring && this._ys.length === 0)) {
      return false; // hidden; the resize observer marks it dirty when shown
    }
    if (!this._dataDirty && this._plot) {
      this._plot.redraw(false, false); // a marker or a line moved
      return true;
    }
    this._dataDirty = false;
    this._draws++;
    this._width = width;
    const buckets = Math.max(16, Math.ceil(width));
    let data: uPlot.AlignedData;
    if (ring) {
      data = this._ringData(ring, buckets);
      this._drawn = (data.length - 1) * data[0].length;
    } else if (this._ys.length === 1 && !this._log) {
      const d = decimateMinMax(this._x, this._ys[0], buckets);
      data = [d.x, d.y];
      this._drawn = d.x.length;
    } else {
      const d = decimateMax(this._x, this._ys, buckets, this._log);
      data = [d.x, ...d.ys];
      this._drawn = d.x.length * d.ys.length;
    }
    if (!this._plot || this._plot.series.length !== data.length) {
      this._destroyPlot();
      this._plot = new uPlot(
        this._makeOptions(width, data.length - 1),
        data,
        this.node
      );
      if (this._legend.parentNode === this.node) {
        this.node.appendChild(this._legend); // under the new plot
      }
    } else {
      this._plot.setData(data);
    }
    return true;
  }

  /**
   * y range over the data and the overlays (log: positive values only). A
   * faded overlay widens the shown run's range by at most twice its span (x100
   * on a log axis): an earlier run that exploded must not squash this one
   * flat. The run picked to compare with is always whole in the range: that
   * is what the user asked to see.
   */
  private _yRange(u: uPlot, dmin: number, dmax: number): uPlot.Range.MinMax {
    let lo = dmin;
    let hi = dmax;
    const own = lo !== null && hi !== null && Number.isFinite(lo + hi);
    const span = own ? Math.max(hi - lo, Math.abs(hi) * 1e-3, 1e-12) : 0;
    const floor = !own ? -Infinity : this._log ? lo / 100 : lo - 2 * span;
    const ceil = !own ? Infinity : this._log ? hi * 100 : hi + 2 * span;
    for (const o of this._overlays) {
      for (const raw of o.y) {
        if (raw !== null && Number.isFinite(raw) && (!this._log || raw > 0)) {
          const v = o.compare ? raw : Math.min(ceil, Math.max(floor, raw));
          lo = lo === null || v < lo ? v : lo;
          hi = hi === null || v > hi ? v : hi;
        }
      }
    }
    if (lo === null || hi === null || !Number.isFinite(lo + hi)) {
      return this._log ? [1, 10] : [0, 1];
    }
    if (this._log) {
      // the data's range to one significant digit (uPlot's rounds out to whole
      // decades, squashing a loss between 0.4 and 2 into a corner)
      const mag = (v: number) => 10 ** Math.floor(Math.log10(v));
      const a = lo / 1.1;
      const b = hi * 1.1;
      return [Math.floor(a / mag(a)) * mag(a), Math.ceil(b / mag(b)) * mag(b)];
    }
    return uPlot.rangeNum(lo, hi, 0.1, true) as uPlot.Range.MinMax;
  }

  private _makeOptions(width: number, count: number): uPlot.Options {
    const fg = themeVar('--jp-ui-font-color2', '#616161');
    const grid = themeVar('--jp-border-color2', '#e0e0e0');
    const warn = themeVar('--jp-error-color1', '#d32f2f');
    const mark = themeVar('--jp-warn-color1', '#f57c00');
    const faint = themeVar('--jp-ui-font-color3', '#9e9e9e');
    const compare = compareColor();
    const font = `10px ${themeVar('--jp-ui-font-family', 'sans-serif')}`;
    const axis: uPlot.Axis = {
      stroke: fg,
      grid: { stroke: grid, width: 1 },
      ticks: { stroke: grid, width: 1 },
      font,
      size: 36
    };
    const labels = this._options.series;
    const series: uPlot.Series[] = [{}];
    const smoothed = !!this._ring && !!this._smooth && count === 2;
    for (let i = 0; i < count; i++) {
      const s = smoothed
        ? labels[0]
        : (labels[i] ?? { label: String(i), color: seriesColor(i) });
      const raw = smoothed && i === 0;
      series.push({
        label: raw ? `${s.label} (raw)` : s.label,
        stroke: s.color,
        alpha: raw ? 0.3 : 1,
        width: i === 0 || smoothed ? 1.5 : 1,
        spanGaps: false,
        points: { show: false }
      });
    }
    const dpr = devicePixelRatio || 1;
    const drawOverlays = (u: uPlot) => {
      if (this._overlays.length === 0) {
        return;
      }
      const ctx = u.ctx;
      const { left, top, width: w, height: h } = u.bbox;
      ctx.save();
      ctx.beginPath();
      ctx.rect(left, top, w, h);
      ctx.clip();
      for (const o of this._overlays) {
        // faded runs faint; the compared run in the theme's strong text colour
        ctx.strokeStyle = o.compare ? compare : faint;
        ctx.globalAlpha = o.compare ? 0.9 : 0.6;
        ctx.lineWidth = (o.compare ? 1.5 : 1) * dpr;
        ctx.setLineDash(o.compare ? [5 * dpr, 3 * dpr] : [3 * dpr, 3 * dpr]);
        ctx.beginPath();
        let pen = false;
        for (let i = 0; i < o.x.length; i++) {
          const v = o.y[i];
          if (v === null || (this._log && v <= 0)) {
            pen = false;
            continue;
          }
          const px = u.valToPos(o.x[i], 'x', true);
          const py = u.valToPos(v, 'y', true);
          if (pen) {
            ctx.lineTo(px, py);
          } else {
            ctx.moveTo(px, py);
            pen = true;
          }
        }
        ctx.stroke();
      }
      ctx.restore();
    };
    const drawOverlay = (u: uPlot) => {
      const ctx = u.ctx;
      const { left, top, width: w, height: h } = u.bbox;
      ctx.save();
      ctx.lineWidth = 1 * dpr;
      if (this._hline !== null && Number.isFinite(this._hline)) {
        const y = u.valToPos(this._hline, 'y', true);
        if (y >= top && y <= top + h) {
          ctx.strokeStyle = warn;
          ctx.setLineDash([4 * dpr, 3 * dpr]);
          ctx.beginPath();
          ctx.moveTo(left, y);
          ctx.lineTo(left + w, y);
          ctx.stroke();
        }
      }
      if (this._marker !== null) {
        const x = u.valToPos(this._marker, 'x', true);
        if (x >= left && x <= left + w) {
          ctx.strokeStyle = mark;
          ctx.setLineDash([]);
          ctx.beginPath();
          ctx.moveTo(x, top);
          ctx.lineTo(x, top + h);
          ctx.stroke();
        }
      }
      ctx.restore();
    };
    const xRange = (
      _u: uPlot,
      dmin: number,
      dmax: number
    ): uPlot.Range.MinMax => {
      let lo = dmin;
      let hi = dmax;
      for (const o of this._overlays) {
        if (o.x.length) {
          lo = lo === null ? o.x[0] : Math.min(lo, o.x[0]);
          hi =
            hi === null
              ? o.x[o.x.length - 1]
              : Math.max(hi, o.x[o.x.length - 1]);
        }
      }
      return lo === null || hi === null
        ? [0, 1]
        : lo === hi
          ? [lo - 1, hi + 1]
          : [lo, hi];
    };
    const overlays = this._overlays.length > 0;
    return {
      width,
      height: this._options.height,
      legend: { show: false },
      // room at the right for the last x tick's label (a clock time is wide)
      padding: [8, this._options.time ? 30 : 12, 0, 0],
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: overlays
          ? { time: !!this._options.time, range: xRange }
          : { time: !!this._options.time },
        y: {
          ...(this._log ? { distr: 3 } : {}),
          // log: the data's own range (uPlot's default widens to whole decades)
          ...(overlays || this._log
            ? { range: (u, lo, hi) => this._yRange(u, lo, hi) }
            : {})
        }
      },
      axes: [
        this._options.time
          ? {
              ...axis,
              space: 64,
              values: (_u, splits) => splits.map(clockTime)
            }
          : axis,
        {
          ...axis,
          size: this._options.ySize ?? 52,
          ...(this._options.yIncrs ? { incrs: this._options.yIncrs } : {}),
          ...(this._options.ySpace ? { space: this._options.ySpace } : {}),
          values: (_u, splits) => {
            const format = this._options.yFormat ?? formatTick;
            if (!this._log) {
              return splits.map(format);
            }
            // A log axis gets a tick per decade: over many decades (an explosion to
            // 1e18) label every k-th so the labels do not overlap. uPlot's own filter
            // may have blanked some splits already (null): count the others.
            const kept = (splits as (number | null)[]).filter(v => v !== null);
            const fit = Math.max(2, Math.floor(this._options.height / 18));
            const every = Math.ceil(kept.length / fit);
            let k = 0;
            return (splits as (number | null)[]).map(v =>
              v === null ? '' : k++ % every === 0 ? format(v) : ''
            );
          }
        }
      ],
      series,
      hooks: { drawAxes: [drawOverlays], draw: [drawOverlay] }
    };
  }

  private _destroyPlot(): void {
    if (this._plot) {
      this._plot.destroy();
      this._plot = null;
    }
  }

  private _options: LineChart.IOptions;
  private _frame: FrameScheduler.IHandle;
  private _plot: uPlot | null = null;
  private _x: ArrayLike<number> = [];
  private _ys: ArrayLike<number>[] = [];
  private _ring: SeriesRing | null = null;
  private _source:
    (() => { x: ArrayLike<number>; ys: ArrayLike<number>[] } | null) | null =
    null;
  private _decimator: MinMaxDecimator | null = null;
  private _smooth = 0;
  private _smoothed: {
    values: Float32Array;
    seen: number;
    ema: Ema;
  } | null = null;
  private _overlays: {
    label: string;
    x: number[];
    y: (number | null)[];
    compare: boolean;
  }[] = [];
  private _shownLabel = '';
  private _fadedText: (runs: string) => string = runs => runs;
  private _legend: HTMLDivElement = Object.assign(
    document.createElement('div'),
    { className: 'jp-TorchDbg-chartLegend' }
  );
  private _log: boolean;
  private _dataDirty = false;
  private _hline: number | null = null;
  private _marker: number | null = null;
  private _width = 0;
  private _drawn = 0;
  private _draws = 0;
  private _resizeObserver: ResizeObserver;
  private _themeObserver: MutationObserver;
}

/** Points an overlay is decimated to once (it does not change). */
const OVERLAY_POINTS = 512;

export namespace LineChart {
  export interface IOptions {
    /** Labels and colours of the series (uPlot's legend is off: nothing rendered as HTML). */
    series: { label: string; color: string }[];
    height: number;
    /** Log-scale y at start (non-positive values are not drawn); see `setLog`. */
    log?: boolean;
    /** The frame scheduler (default the shared `frames`; tests pass their own). */
    scheduler?: FrameScheduler;
    /** x is Unix time in seconds: clock-time ticks instead of raw numbers. */
    time?: boolean;
    /** y tick labels (default `formatTick`), e.g. bytes as "512 MiB". */
    yFormat?: (v: number) => string;
    /** Width of the y axis in pixels (default 52: fits `formatTick`'s labels). */
    ySize?: number;
    /** Tick steps of the y axis (uPlot `incrs`), e.g. binary steps for bytes. */
    yIncrs?: number[];
    /** Least pixels between y ticks (uPlot `space`, default 30). */
    ySpace?: number;
  }
}
