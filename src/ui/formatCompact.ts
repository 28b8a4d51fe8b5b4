/**
 * A number in at most 3 significant digits for narrow columns (the layer table, the
 * Now strip): `9.46e-5`, `0.452`, `123`, `1234`, `1.23e5`. At most 8 characters for
 * a non-negative value (9 beyond e±99), never a space, so a 250 px sidebar never
 * wraps it; NaN and ±Inf are named. `expDigits`: significant digits in exponent
 * form (2 in the Now strip, where every character counts: `1.7e25`).
 */
export function formatCompact(v: number, expDigits = 3): string {
  if (Number.isNaN(v)) {
    return 'NaN';
  }
  if (!Number.isFinite(v)) {
    return v > 0 ? '+Inf' : '-Inf';
  }
  const a = Math.abs(v);
  if (a === 0) {
    return '0';
  }
  if (a < 1e-3 || a >= 1e5) {
    // 9.461e-5 -> "9.46e-5"; 1.5e+12 -> "1.50e12" (no "+": shorter, still exact enough)
    return v.toExponential(expDigits - 1).replace('e+', 'e');
  }
  if (a >= 1000) {
    return String(Math.round(v));
  }
  // toPrecision keeps 3 significant digits; Number() drops trailing zeros ("0.500" -> "0.5")
  return String(Number(v.toPrecision(3)));
}
