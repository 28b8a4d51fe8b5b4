/** Learning rates as the control panel shows them and reads them typed. */

/** A learning rate as typed and read: short, exact enough, never rounded to 0. */
export function formatLr(v: number): string {
  if (!Number.isFinite(v)) {
    return String(v);
  }
  return String(Number(v.toPrecision(6)));
}

/** The largest learning rate the kernel accepts (`set_lr` in the schema). */
export const MAX_LR = 1e6;

/** A typed learning rate, or null unless a finite number > 0 and ≤ MAX_LR. */
export function parseLr(text: string): number | null {
  const v = Number(text.trim());
  return text.trim() !== '' && Number.isFinite(v) && v > 0 && v <= MAX_LR
    ? v
    : null;
}

/** `drafts` (what is typed per `key/group`) less one key. */
export function without(
  drafts: Record<string, string>,
  key: string
): Record<string, string> {
  const out = { ...drafts };
  delete out[key];
  return out;
}
