/**
 * The legend under a line chart while earlier runs are overlaid: the shown
 * run (solid), the run compared with and the faded runs (dashed). Text only
 * (labels come from the kernel: never parsed as HTML).
 */
import type { IDrawnOverlay } from './overlay';
import { compareColor, themeVar } from './theme';

export class ChartLegend {
  /** The legend's element; in the chart's node only while overlays are drawn. */
  readonly node: HTMLDivElement = Object.assign(document.createElement('div'), {
    className: 'jp-TorchDbg-chartLegend'
  });

  /**
   * Fill the legend and put it at the end of `host`, or take it out when
   * there are no overlays. `shown` and `color` are the solid line's;
   * `faded` words the faded runs' entry.
   */
  render(
    host: HTMLElement,
    overlays: readonly IDrawnOverlay[],
    shown: string,
    color: string,
    faded: (runs: string) => string
  ): void {
    const legend = this.node;
    legend.replaceChildren();
    if (overlays.length === 0) {
      legend.remove();
      return;
    }
    legend.append(legendItem(shown, color, false, 'shown'));
    for (const o of overlays.filter(o => o.compare)) {
      legend.append(legendItem(o.label, compareColor(), true, 'compare'));
    }
    const fadedRuns = overlays.filter(o => !o.compare).map(o => o.label);
    if (fadedRuns.length) {
      legend.append(
        legendItem(
          faded(fadedRuns.join(', ')),
          themeVar('--jp-ui-font-color3', '#9e9e9e'),
          true,
          'faded'
        )
      );
    }
    host.appendChild(legend);
  }

  /** Keep the legend under the plot after the plot was created again. */
  keepLast(host: HTMLElement): void {
    if (this.node.parentNode === host) {
      host.appendChild(this.node);
    }
  }
}

/** One legend entry: a line sample (solid or dashed) and its label. */
function legendItem(
  text: string,
  color: string,
  dashed: boolean,
  kind: string
): HTMLElement {
  const item = document.createElement('span');
  item.className = 'jp-TorchDbg-chartLegendItem';
  item.dataset.kind = kind;
  const swatch = document.createElement('span');
  swatch.className = 'jp-TorchDbg-chartLegendLine';
  swatch.style.borderTopColor = color;
  swatch.style.borderTopStyle = dashed ? 'dashed' : 'solid';
  const label = document.createElement('span');
  label.textContent = text;
  item.append(swatch, label);
  return item;
}
