/** Format a value for the card header: short, and honest about NaN/Inf. */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) {
    return 'NaN';
  }
  if (!Number.isFinite(v)) {
    return v > 0 ? '+Inf' : '-Inf';
  }
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) {
    return v.toExponential(3);
  }
  return v.toPrecision(4);
}
