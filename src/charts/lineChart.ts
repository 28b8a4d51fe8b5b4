import uPlot from 'uplot';

import { SeriesRing } from '../model/ringbuffer';
import { makeAxes, xRange, yRange } from './axes';
import { decimateMax, decimateMinMax } from './decimate';
import { drawMarks, drawOverlays } from './drawing';
import { FrameScheduler, frames } from './frame';
import { ChartLegend } from './legend';
import { IDrawnOverlay, IOverlay, prepareOverlays } from './overlay';
import { RingData } from './ringData';
import { compareColor, seriesColor, themeVar } from './theme';

// The chart's parts, as the panels import them (one module per idea:
// theme.ts colours, axes.ts ticks and ranges, smoothing.ts the EMA,
// overlay.ts / legend.ts / drawing.ts the earlier runs and reference lines).
export { clockTime, formatTick } from './axes';
export type { IOverlay } from './overlay';
export { DEFAULT_SMOOTHING, Ema, smoothEma } from './smoothing';
export { compareColor, SERIES_PALETTE, seriesColor, themeVar } from './theme';

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
      this._ringData.reset();
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
      this._ringData.reset();
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
    this._overlays = prepareOverlays(overlays);
    this._shownLabel = shown ?? this._options.series[0]?.label ?? '';
    this._fadedText = faded;
    this._renderLegend();
    this._rebuild();
  }

  /** The legend under the chart while overlays are drawn (text only). */
  get legend(): HTMLElement {
    return this._legend.node;
  }

  private _renderLegend(): void {
    this._legend.render(
      this.node,
      this._overlays,
      this._shownLabel,
      this._options.series[0]?.color ?? seriesColor(0),
      this._fadedText
    );
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
    this._ringData.resetDecimation();
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
      data = this._ringData.data(ring, buckets, this._log, this._smooth);
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
      this._legend.keepLast(this.node); // under the new plot
    } else {
      this._plot.setData(data);
    }
    return true;
  }

  private _makeOptions(width: number, count: number): uPlot.Options {
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
    const runColors = {
      compare: compareColor(),
      faint: themeVar('--jp-ui-font-color3', '#9e9e9e')
    };
    const markColors = {
      hline: themeVar('--jp-error-color1', '#d32f2f'),
      marker: themeVar('--jp-warn-color1', '#f57c00')
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
          ? {
              time: !!this._options.time,
              range: (_u, lo, hi) => xRange(lo, hi, this._overlays)
            }
          : { time: !!this._options.time },
        y: {
          ...(this._log ? { distr: 3 } : {}),
          // log: the data's own range (uPlot's default widens to whole decades)
          ...(overlays || this._log
            ? {
                range: (_u, lo, hi) => yRange(lo, hi, this._overlays, this._log)
              }
            : {})
        }
      },
      axes: makeAxes(this._options, () => this._log),
      series,
      hooks: {
        drawAxes: [
          u => drawOverlays(u, this._overlays, this._log, runColors, dpr)
        ],
        draw: [u => drawMarks(u, this._hline, this._marker, markColors, dpr)]
      }
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
  private _ringData = new RingData();
  private _smooth = 0;
  private _overlays: IDrawnOverlay[] = [];
  private _shownLabel = '';
  private _fadedText: (runs: string) => string = runs => runs;
  private _legend = new ChartLegend();
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
