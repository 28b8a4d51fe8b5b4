/**
 * The axes of a line chart: tick labels (short numbers, clock times, thinned
 * decades on a log axis) and the x and y ranges, which take the overlaid
 * runs into account.
 */
import uPlot from 'uplot';

import type { IDrawnOverlay } from './overlay';
import { themeVar } from './theme';

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

/** What the axes are built from (a subset of `LineChart.IOptions`). */
export interface IAxesOptions {
  height: number;
  time?: boolean;
  yFormat?: (v: number) => string;
  ySize?: number;
  yIncrs?: number[];
  ySpace?: number;
}

/**
 * The x and y axes in the theme's colours. `log` is read when the ticks are
 * labelled: a log axis labels every k-th decade so that the labels of a wide
 * range (an explosion to 1e18) do not overlap.
 */
export function makeAxes(
  options: IAxesOptions,
  log: () => boolean
): uPlot.Axis[] {
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
  return [
    options.time
      ? {
          ...axis,
          space: 64,
          values: (_u, splits) => splits.map(clockTime)
        }
      : axis,
    {
      ...axis,
      size: options.ySize ?? 52,
      ...(options.yIncrs ? { incrs: options.yIncrs } : {}),
      ...(options.ySpace ? { space: options.ySpace } : {}),
      values: (_u, splits) => {
        const format = options.yFormat ?? formatTick;
        if (!log()) {
          return splits.map(format);
        }
        // A log axis gets a tick per decade: over many decades (an explosion to
        // 1e18) label every k-th so the labels do not overlap. uPlot's own filter
        // may have blanked some splits already (null): count the others.
        const kept = (splits as (number | null)[]).filter(v => v !== null);
        const fit = Math.max(2, Math.floor(options.height / 18));
        const every = Math.ceil(kept.length / fit);
        let k = 0;
        return (splits as (number | null)[]).map(v =>
          v === null ? '' : k++ % every === 0 ? format(v) : ''
        );
      }
    }
  ];
}

/** x range over the data and the overlays (a single x is widened by 1 each way). */
export function xRange(
  dmin: number,
  dmax: number,
  overlays: readonly IDrawnOverlay[]
): uPlot.Range.MinMax {
  let lo = dmin;
  let hi = dmax;
  for (const o of overlays) {
    if (o.x.length) {
      lo = lo === null ? o.x[0] : Math.min(lo, o.x[0]);
      hi =
        hi === null ? o.x[o.x.length - 1] : Math.max(hi, o.x[o.x.length - 1]);
    }
  }
  return lo === null || hi === null
    ? [0, 1]
    : lo === hi
      ? [lo - 1, hi + 1]
      : [lo, hi];
}

/**
 * y range over the data and the overlays (log: positive values only). A
 * faded overlay widens the shown run's range by at most twice its span (x100
 * on a log axis): an earlier run that exploded must not squash this one
 * flat. The run picked to compare with is always whole in the range: that
 * is what the user asked to see.
 */
export function yRange(
  dmin: number,
  dmax: number,
  overlays: readonly IDrawnOverlay[],
  log: boolean
): uPlot.Range.MinMax {
  let lo = dmin;
  let hi = dmax;
  const own = lo !== null && hi !== null && Number.isFinite(lo + hi);
  const span = own ? Math.max(hi - lo, Math.abs(hi) * 1e-3, 1e-12) : 0;
  const floor = !own ? -Infinity : log ? lo / 100 : lo - 2 * span;
  const ceil = !own ? Infinity : log ? hi * 100 : hi + 2 * span;
  for (const o of overlays) {
    for (const raw of o.y) {
      if (raw !== null && Number.isFinite(raw) && (!log || raw > 0)) {
        const v = o.compare ? raw : Math.min(ceil, Math.max(floor, raw));
        lo = lo === null || v < lo ? v : lo;
        hi = hi === null || v > hi ? v : hi;
      }
    }
  }
  if (lo === null || hi === null || !Number.isFinite(lo + hi)) {
    return log ? [1, 10] : [0, 1];
  }
  if (log) {
    // the data's range to one significant digit (uPlot's rounds out to whole
    // decades, squashing a loss between 0.4 and 2 into a corner)
    const mag = (v: number) => 10 ** Math.floor(Math.log10(v));
    const a = lo / 1.1;
    const b = hi * 1.1;
    return [Math.floor(a / mag(a)) * mag(a), Math.ceil(b / mag(b)) * mag(b)];
  }
  return uPlot.rangeNum(lo, hi, 0.1, true) as uPlot.Range.MinMax;
}
