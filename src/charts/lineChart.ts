import uPlot from 'uplot';

import { decimateMax, decimateMinMax } from './decimate';

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

/** Line colours that read on light and dark backgrounds (JupyterLab's palette). */
export function seriesColor(i: number): string {
  const vars = [
    ['--jp-brand-color1', '#1976d2'],
    ['--jp-warn-color1', '#f57c00'],
    ['--jp-success-color1', '#388e3c'],
    ['--jp-error-color1', '#d32f2f'],
    ['--jp-accent-color1', '#00838f']
  ];
  const [name, fallback] = vars[i % vars.length];
  return themeVar(name, fallback);
}

/**
 * A live line chart drawn with uPlot on a canvas: one series (min/max
 * decimated, spikes kept) or several sharing x (bucket-max decimated).
 *
 * `setData` only stores the arrays; the chart redraws at most once per
 * animation frame at about two points per pixel. Optional horizontal line
 * (a threshold) and vertical marker (a step picked from an alarm).
 */
export class LineChart {
  constructor(options: LineChart.IOptions) {
    this.node = document.createElement('div');
    this.node.className = 'jp-TorchDbg-chart';
    this._options = options;
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

  /** Points drawn at the last redraw (after decimation). */
  get drawnPoints(): number {
    return this._drawn;
  }

  /** Replace the data (one y array per series); schedules one redraw. */
  setData(x: ArrayLike<number>, ...ys: ArrayLike<number>[]): void {
    this._x = x;
    this._ys = ys;
    this._schedule();
  }

  /** A horizontal reference line (e.g. the explosion threshold), or none. */
  setHLine(value: number | null): void {
    if (value !== this._hline) {
      this._hline = value;
      this._plot?.redraw(false, false);
    }
  }

  /** A vertical marker at x (e.g. the step of an alarm), or none. */
  setMarker(x: number | null): void {
    if (x !== this._marker) {
      this._marker = x;
      this._plot?.redraw(false, false);
    }
  }

  /** Rebuild with the current theme colours (after a theme switch). */
  refreshTheme(): void {
    this._destroyPlot();
    this._schedule();
  }

  dispose(): void {
    if (this._frame !== null) {
      cancelAnimationFrame(this._frame);
      this._frame = null;
    }
    this._resizeObserver.disconnect();
    this._themeObserver.disconnect();
    this._destroyPlot();
  }

  private _schedule(): void {
    if (this._frame === null) {
      this._frame = requestAnimationFrame(() => {
        this._frame = null;
        this._draw();
      });
    }
  }

  private _onResize(): void {
    const width = this.node.clientWidth;
    if (width > 0 && width !== this._width) {
      this._width = width;
      if (this._plot) {
        this._plot.setSize({ width, height: this._options.height });
      }
      this._schedule();
    }
  }

  private _draw(): void {
    const width = this.node.clientWidth;
    if (width <= 0 || this._ys.length === 0) {
      return; // hidden; the resize observer redraws when shown
    }
    this._width = width;
    const buckets = Math.max(16, Math.ceil(width));
    let data: uPlot.AlignedData;
    if (this._ys.length === 1 && !this._options.log) {
      const d = decimateMinMax(this._x, this._ys[0], buckets);
      data = [d.x, d.y];
      this._drawn = d.x.length;
    } else {
      const d = decimateMax(this._x, this._ys, buckets, !!this._options.log);
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
    } else {
      this._plot.setData(data);
    }
  }

  private _makeOptions(width: number, count: number): uPlot.Options {
    const fg = themeVar('--jp-ui-font-color2', '#616161');
    const grid = themeVar('--jp-border-color2', '#e0e0e0');
    const warn = themeVar('--jp-error-color1', '#d32f2f');
    const mark = themeVar('--jp-warn-color1', '#f57c00');
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
    for (let i = 0; i < count; i++) {
      const s = labels[i] ?? { label: String(i), color: seriesColor(i) };
      series.push({
        label: s.label,
        stroke: s.color,
        width: i === 0 ? 1.5 : 1,
        spanGaps: false,
        points: { show: false }
      });
    }
    const drawOverlay = (u: uPlot) => {
      const ctx = u.ctx;
      const { left, top, width: w, height: h } = u.bbox;
      ctx.save();
      ctx.lineWidth = 1 * devicePixelRatio;
      if (this._hline !== null && Number.isFinite(this._hline)) {
        const y = u.valToPos(this._hline, 'y', true);
        if (y >= top && y <= top + h) {
          ctx.strokeStyle = warn;
          ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
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
    return {
      width,
      height: this._options.height,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: { time: !!this._options.time },
        y: this._options.log ? { distr: 3 } : {}
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
          values: (_u, splits) => {
            const format = this._options.yFormat ?? formatTick;
            if (!this._options.log) {
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
      hooks: { draw: [drawOverlay] }
    };
  }

  private _destroyPlot(): void {
    if (this._plot) {
      this._plot.destroy();
      this._plot = null;
    }
  }

  private _options: LineChart.IOptions;
  private _plot: uPlot | null = null;
  private _x: ArrayLike<number> = [];
  private _ys: ArrayLike<number>[] = [];
  private _hline: number | null = null;
  private _marker: number | null = null;
  private _frame: number | null = null;
  private _width = 0;
  private _drawn = 0;
  private _resizeObserver: ResizeObserver;
  private _themeObserver: MutationObserver;
}

export namespace LineChart {
  export interface IOptions {
    /** Labels and colours of the series (uPlot's legend is off: nothing rendered as HTML). */
    series: { label: string; color: string }[];
    height: number;
    /** Log-scale y (non-positive values are not drawn). */
    log?: boolean;
    /** x is Unix time in seconds: clock-time ticks instead of raw numbers. */
    time?: boolean;
    /** y tick labels (default `formatTick`), e.g. bytes as "512 MiB". */
    yFormat?: (v: number) => string;
    /** Width of the y axis in pixels (default 52: fits `formatTick`'s labels). */
    ySize?: number;
  }
}
