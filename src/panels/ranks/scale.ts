import { wireNumber } from '../../protocol/messages';
import type { RankNow, RankTrouble } from './model';

/** Above this many ranks the grid shows outliers and heatmaps, not a row per rank. */
export const SCALE_ABOVE = 16;
/** Outlier rows shown at most. */
export const MAX_OUTLIERS = 6;
/** A rank's step time this far above the median makes it the slowest outlier. */
export const SLOW_RATIO = 1.25;
/** A norm this far from the median (above, or below its inverse) is an outlier. */
export const NORM_RATIO = 1.25;
/** Colour levels of a heatmap (CSS classes `jp-mod-level0` .. `level4`). */
export const LEVELS = 5;
/** Smallest and largest heatmap cell, in px. */
export const MIN_CELL = 8;
export const MAX_CELL = 24;

/** Why a rank is among the outliers. */
export type OutlierReason =
  Exclude<RankTrouble, null> | 'slowest' | 'highest_norm' | 'lowest_norm';

export interface IOutlier {
  rank: number;
  reason: OutlierReason;
}

function median(values: number[]): number | null {
  if (values.length === 0) {
    return null;
  }
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** A rank's gradient norm as a number (NaN/Infinity from the wire), or null. */
export function normOf(r: RankNow): number | null {
  return r.grad_norm === null ? null : wireNumber(r.grad_norm);
}

/**
 * The ranks worth a row when there are too many for one row each, most urgent
 * first: ranks in trouble (failed, lost, stalled, or singled out by an alarm:
 * `trouble`), a non-finite norm, then the slowest rank, the highest and the
 * lowest gradient norm when they stand out from the median. Each rank once; at
 * most `max`.
 */
export function pickOutliers(
  ranks: readonly RankNow[],
  trouble: (rank: number) => RankTrouble,
  max = MAX_OUTLIERS
): IOutlier[] {
  const out: IOutlier[] = [];
  const taken = new Set<number>();
  const add = (rank: number, reason: OutlierReason) => {
    if (!taken.has(rank) && out.length < max) {
      taken.add(rank);
      out.push({ rank, reason });
    }
  };
  for (const r of ranks) {
    const t = trouble(r.identity.rank);
    if (t !== null) {
      add(r.identity.rank, t);
    }
  }
  for (const r of ranks) {
    const n = normOf(r);
    if (n !== null && !Number.isFinite(n)) {
      add(r.identity.rank, 'non_finite');
    }
  }
  const timed = ranks.filter(
    r => r.step_time_s !== null && Number.isFinite(r.step_time_s)
  );
  const midTime = median(timed.map(r => r.step_time_s as number));
  if (midTime !== null && timed.length > 1) {
    const slow = timed.reduce((a, b) =>
      (b.step_time_s as number) > (a.step_time_s as number) ? b : a
    );
    if ((slow.step_time_s as number) >= SLOW_RATIO * midTime) {
      add(slow.identity.rank, 'slowest');
    }
  }
  const normed = ranks
    .map(r => ({ rank: r.identity.rank, n: normOf(r) }))
    .filter((x): x is { rank: number; n: number } =>
      Number.isFinite(x.n as number)
    );
  const midNorm = median(normed.map(x => x.n));
  if (midNorm !== null && normed.length > 1) {
    const hi = normed.reduce((a, b) => (b.n > a.n ? b : a));
    const lo = normed.reduce((a, b) => (b.n < a.n ? b : a));
    if (hi.n > 0 && hi.n >= NORM_RATIO * midNorm) {
      add(hi.rank, 'highest_norm');
    }
    if (lo.n * NORM_RATIO <= midNorm && lo.rank !== hi.rank) {
      add(lo.rank, 'lowest_norm');
    }
  }
  return out;
}

export interface IHeatLayout {
  cols: number;
  rows: number;
  /** Cell side in px (a 1 px gap included). */
  cell: number;
  width: number;
  height: number;
}

/**
 * Cells for `count` ranks in `width` px: about square (ceil of the square
 * root in columns), as many more columns as needed to keep cells at least
 * `MIN_CELL`, cells at most `MAX_CELL`. 256 ranks in 218 px: 16 × 16 cells of
 * 13 px.
 */
export function heatLayout(count: number, width: number): IHeatLayout {
  const n = Math.max(1, count);
  const fit = Math.max(1, Math.floor(width / MIN_CELL));
  let cols = Math.min(n, Math.max(Math.ceil(Math.sqrt(n)), 1));
  if (cols > fit) {
    cols = fit;
  }
  while (Math.floor(width / cols) < MIN_CELL && cols > 1) {
    cols--;
  }
  const cell = Math.max(
    1,
    Math.min(MAX_CELL, Math.floor(width / Math.max(cols, 1)))
  );
  const rows = Math.ceil(n / cols);
  return { cols, rows, cell, width: cols * cell, height: rows * cell };
}

export interface IHeatScale {
  lo: number | null;
  hi: number | null;
  /** 0 .. LEVELS-1 for a finite value, 'bad' for NaN/±Infinity, null when unknown. */
  level(v: number | null): number | 'bad' | null;
}

/**
 * A linear colour scale over the finite values' range: the lowest in level 0,
 * the highest in the last level; every value in level 0 when they are all
 * equal (the usual case for all-reduced norms: nothing stands out).
 */
export function heatScale(values: readonly (number | null)[]): IHeatScale {
  const finite = values.filter(
    (v): v is number => v !== null && Number.isFinite(v)
  );
  const lo = finite.length ? Math.min(...finite) : null;
  const hi = finite.length ? Math.max(...finite) : null;
  return {
    lo,
    hi,
    level(v: number | null) {
      if (v === null) {
        return null;
      }
      if (!Number.isFinite(v)) {
        return 'bad';
      }
      if (lo === null || hi === null || hi <= lo) {
        return 0;
      }
      const x = (v - lo) / (hi - lo);
      return Math.min(LEVELS - 1, Math.max(0, Math.floor(x * LEVELS)));
    }
  };
}
