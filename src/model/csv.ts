/**
 * Cells of the CSV exports, in the forms `pandas.read_csv` reads as they are:
 * NaN and ±Inf as `nan`, `inf`, `-inf`; text always quoted.
 */

/** A text cell, quoted; a leading =, +, -, @ is neutralised (CSV injection). */
export function csvText(v: string): string {
  const safe = /^[=+\-@]/.test(v) ? `'${v}` : v;
  return `"${safe.replace(/"/g, '""')}"`;
}

/** A number as JavaScript prints it, non-finite ones as pandas reads them. */
export function csvNumber(v: number): string {
  return Number.isNaN(v)
    ? 'nan'
    : v === Infinity
      ? 'inf'
      : v === -Infinity
        ? '-inf'
        : String(v);
}

/** A float32 value in its shortest round-tripping form (9 significant digits at most). */
export function csvFloat32(v: number): string {
  if (!Number.isFinite(v)) {
    return csvNumber(v);
  }
  const f = Math.fround(v);
  for (let p = 6; p < 9; p++) {
    const s = Number(v.toPrecision(p));
    if (Math.fround(s) === f) {
      return String(s);
    }
  }
  return String(Number(v.toPrecision(9)));
}
