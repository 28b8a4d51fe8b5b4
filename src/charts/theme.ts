/**
 * Chart colours from the JupyterLab theme: the series palette, the line of
 * the run compared with, and the theme-variable lookup the charts share.
 */

/** Read a JupyterLab theme variable (falls back when unset, e.g. in tests). */
export function themeVar(name: string, fallback: string): string {
  const v = getComputedStyle(document.body).getPropertyValue(name).trim();
  return v || fallback;
}

/**
 * Line colours that read on light and dark backgrounds, 8 distinct hues:
 * JupyterLab's status colours (not --jp-accent-color1, the same green as
 * --jp-success-color1 in both themes), then mid-tone material colours
 * (defined the same in both themes).
 */
export const SERIES_PALETTE: readonly (readonly [string, string])[] = [
  ['--jp-brand-color1', '#1976d2'],
  ['--jp-warn-color1', '#f57c00'],
  ['--jp-success-color1', '#388e3c'],
  ['--jp-error-color1', '#d32f2f'],
  ['--jp-info-color1', '#0097a7'],
  ['--md-purple-400', '#ab47bc'],
  ['--md-pink-400', '#ec407a'],
  ['--md-brown-400', '#8d6e63']
];

export function seriesColor(i: number): string {
  const [name, fallback] = SERIES_PALETTE[i % SERIES_PALETTE.length];
  return themeVar(name, fallback);
}

/** The line of the run compared with: the theme's strong text colour (reads on both). */
export function compareColor(): string {
  return themeVar('--jp-ui-font-color1', '#424242');
}
