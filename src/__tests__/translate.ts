import type { TranslationBundle } from '@jupyterlab/translation';

/** `trans.__` as JupyterLab's null translator does it (%1, %2 substituted). */
const sub = (s: string, args: unknown[]) =>
  s.replace(/%(\d+)/g, (_, i) => String(args[Number(i) - 1]));

export const trans = {
  __: (s: string, ...args: unknown[]) => sub(s, args),
  _n: (one: string, many: string, n: number, ...args: unknown[]) =>
    sub(n === 1 ? one : many, [n, ...args])
} as unknown as TranslationBundle;

/** Markup a kernel might send: the panel must render it as text, never as HTML. */
export const XSS = '<img src=x onerror="window.__pwned=1">';
