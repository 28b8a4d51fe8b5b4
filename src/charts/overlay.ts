import { decimateMinMax } from './decimate';

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

/** An overlay as the chart keeps it: decimated once, gaps as null. */
export interface IDrawnOverlay {
  label: string;
  x: number[];
  y: (number | null)[];
  compare: boolean;
}

/** Points an overlay is decimated to once (it does not change). */
export const OVERLAY_POINTS = 512;

/** Decimate the overlays once, as they are set (min/max: spikes kept). */
export function prepareOverlays(
  overlays: ReadonlyArray<IOverlay>
): IDrawnOverlay[] {
  return overlays.map(o => {
    const d = decimateMinMax(o.x, o.y, OVERLAY_POINTS);
    return { label: o.label, x: d.x, y: d.y, compare: !!o.compare };
  });
}
