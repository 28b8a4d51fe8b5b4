import { formatBytes } from './format';

/**
 * y tick steps of a byte axis: 1, 2, 5, 10, ... of B, KiB, MiB, GiB, TiB, so
 * ticks read "250 MiB", "300 MiB" (not "190.7 MiB").
 */
export const BYTE_INCREMENTS: number[] = (() => {
  const out: number[] = [];
  for (let k = 0; k <= 4; k++) {
    for (const m of [1, 2, 5, 10, 20, 50, 100, 200, 500]) {
      out.push(m * 1024 ** k);
    }
  }
  return out;
})();

/**
 * Memory timelines: x is Unix time in seconds (clock ticks, room at the right
 * for the last one), y bytes with "MiB"/"GiB" tick labels on binary steps.
 */
export const TIMELINE = {
  time: true,
  yFormat: (v: number) => formatBytes(v),
  yIncrs: BYTE_INCREMENTS,
  ySpace: 20,
  ySize: 60 // "1023 MiB"
};
