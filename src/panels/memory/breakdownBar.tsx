import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { IMemoryBreakdownRow } from '../../protocol/messages';
import { formatBytes } from './format';

/** One colour per category (style/layout.css `.jp-TorchDbg-cat-<key>`: four distinct theme colours). */
const CATEGORIES: {
  key: 'parameters' | 'gradients' | 'optimizer_state' | 'other';
  label: string;
}[] = [
  { key: 'parameters', label: 'parameters' },
  { key: 'gradients', label: 'gradients' },
  { key: 'optimizer_state', label: 'optimizer state' },
  { key: 'other', label: 'everything else' }
];

/** The breakdown of one device as a stacked bar with a legend. */
export function BreakdownBar(props: {
  row: IMemoryBreakdownRow;
  trans: TranslationBundle;
}): JSX.Element {
  const { row, trans } = props;
  const values = CATEGORIES.map(c => Math.max(0, Number(row[c.key] ?? 0)));
  const sum = values.reduce((a, b) => a + b, 0) || 1;
  return (
    <div className="jp-TorchDbg-breakdown" data-device={row.device}>
      <div className="jp-TorchDbg-chartTitle">
        {trans.__('%1 · total %2', row.device, formatBytes(row.total))}
        <span>
          {row.total_source === 'rss' ? trans.__('(process RSS)') : ''}
        </span>
      </div>
      <div
        className="jp-TorchDbg-bar"
        role="img"
        aria-label={trans.__('memory breakdown')}
      >
        {CATEGORIES.map((c, i) => (
          <span
            key={c.key}
            className={`jp-TorchDbg-cat-${c.key}`}
            style={{ width: `${(100 * values[i]) / sum}%` }}
          />
        ))}
      </div>
      <ul className="jp-TorchDbg-legend">
        {CATEGORIES.map((c, i) => (
          <li key={c.key}>
            <span className={`jp-TorchDbg-swatch jp-TorchDbg-cat-${c.key}`} />
            <span className="jp-TorchDbg-layerName">{trans.__(c.label)}</span>
            <span>
              {formatBytes(c.key === 'other' ? row.other : values[i])}
            </span>
          </li>
        ))}
      </ul>
    </div>
  );
}
