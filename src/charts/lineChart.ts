import uPlot from 'uplot';

import { decimateMinMax } from './decimate';

/** Read a JupyterLab theme variable (falls back when unset, e.g. in tests). */
export function themeVar(name: string, fallback: string): string {
  const v = getComputedStyle(document.body).getPropertyValue(name).trim();
  return v || fallback;
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
 * A live line chart for one series, drawn with uPlot on a canvas.
 *
 * `setData` only stores the arrays; the chart redraws at most once per
 * animation frame, after min/max decimation to about two points per pixel.
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

  /** Replace the data; schedules one redraw. */
  setData(x: ArrayLike<number>, y: ArrayLike<number>): void {
    this._x = x;
    this._y = y;
    this._schedule();
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
    if (width <= 0) {
      return; // hidden; the resize observer redraws when shown
    }
    this._width = width;
    const d = decimateMinMax(this._x, this._y, Math.max(16, Math.ceil(width)));
    this._drawn = d.x.length;
    const data: uPlot.AlignedData = [d.x, d.y];
    if (!this._plot) {
      this._plot = new uPlot(this._makeOptions(width), data, this.node);
    } else {
      this._plot.setData(data);
    }
  }

  private _makeOptions(width: number): uPlot.Options {
    const fg = themeVar('--jp-ui-font-color2', '#616161');
    const grid = themeVar('--jp-border-color2', '#e0e0e0');
    const font = `10px ${themeVar('--jp-ui-font-family', 'sans-serif')}`;
    const axis: uPlot.Axis = {
      stroke: fg,
      grid: { stroke: grid, width: 1 },
      ticks: { stroke: grid, width: 1 },
      font,
      size: 36
    };
    return {
      width,
      height: this._options.height,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: { time: false },
        y: this._options.log ? { distr: 3 } : {}
      },
      axes: [axis, { ...axis, size: 52 }],
      series: [
        {},
        {
          label: this._options.label,
          stroke: this._options.color,
          width: 1.5,
          spanGaps: false,
          points: { show: false }
        }
      ]
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
  private _y: ArrayLike<number> = [];
  private _frame: number | null = null;
  private _width = 0;
  private _drawn = 0;
  private _resizeObserver: ResizeObserver;
  private _themeObserver: MutationObserver;
}

export namespace LineChart {
  export interface IOptions {
    /** Series label (plain text; uPlot renders it as text). */
    label: string;
    color: string;
    height: number;
    log?: boolean;
  }
}
