/**
 * What a line chart draws on uPlot's canvas itself, in its hooks: the
 * overlaid runs (dashed, under the series) and the reference lines (a
 * horizontal threshold, a vertical marker) over everything.
 */
import type uPlot from 'uplot';

import type { IDrawnOverlay } from './overlay';

/** Colours of the overlaid runs: the compared run strong, the faded ones faint. */
export interface IOverlayColors {
  compare: string;
  faint: string;
}

/** Draw the overlays dashed inside the plot area (a `drawAxes` hook: under the series). */
export function drawOverlays(
  u: uPlot,
  overlays: readonly IDrawnOverlay[],
  log: boolean,
  colors: IOverlayColors,
  dpr: number
): void {
  if (overlays.length === 0) {
    return;
  }
  const ctx = u.ctx;
  const { left, top, width: w, height: h } = u.bbox;
  ctx.save();
  ctx.beginPath();
  ctx.rect(left, top, w, h);
  ctx.clip();
  for (const o of overlays) {
    // faded runs faint; the compared run in the theme's strong text colour
    ctx.strokeStyle = o.compare ? colors.compare : colors.faint;
    ctx.globalAlpha = o.compare ? 0.9 : 0.6;
    ctx.lineWidth = (o.compare ? 1.5 : 1) * dpr;
    ctx.setLineDash(o.compare ? [5 * dpr, 3 * dpr] : [3 * dpr, 3 * dpr]);
    ctx.beginPath();
    let pen = false;
    for (let i = 0; i < o.x.length; i++) {
      const v = o.y[i];
      if (v === null || (log && v <= 0)) {
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
}

/** Colours of the reference lines. */
export interface IMarkColors {
  /** The horizontal threshold line. */
  hline: string;
  /** The vertical marker. */
  marker: string;
}

/**
 * The horizontal threshold line (dashed) and the vertical marker, each only
 * when set and inside the plot area (a `draw` hook: over the series).
 */
export function drawMarks(
  u: uPlot,
  hline: number | null,
  marker: number | null,
  colors: IMarkColors,
  dpr: number
): void {
  const ctx = u.ctx;
  const { left, top, width: w, height: h } = u.bbox;
  ctx.save();
  ctx.lineWidth = 1 * dpr;
  if (hline !== null && Number.isFinite(hline)) {
    const y = u.valToPos(hline, 'y', true);
    if (y >= top && y <= top + h) {
      ctx.strokeStyle = colors.hline;
      ctx.setLineDash([4 * dpr, 3 * dpr]);
      ctx.beginPath();
      ctx.moveTo(left, y);
      ctx.lineTo(left + w, y);
      ctx.stroke();
    }
  }
  if (marker !== null) {
    const x = u.valToPos(marker, 'x', true);
    if (x >= left && x <= left + w) {
      ctx.strokeStyle = colors.marker;
      ctx.setLineDash([]);
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + h);
      ctx.stroke();
    }
  }
  ctx.restore();
}
