import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { TorchDbgModel } from '../../model/model';
import { IGradTrack, wireNumber } from '../../protocol/messages';
import { formatCompact } from '../../ui/formatCompact';
import { formatValue } from '../../ui/formatValue';

type SortKey = 'name' | 'last' | 'max' | 'min' | 'nonfinite';

/**
 * Per-layer norms of one track, sortable by any column. Fits a 250 px sidebar:
 * fixed columns, numbers in 3 significant digits (full value in the tooltip) that
 * never wrap, layer names cut with an ellipsis (full name and shape in the tooltip).
 */
export function LayerTable(props: {
  model: TorchDbgModel;
  track: IGradTrack;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { model, track, trans } = props;
  const [sort, setSort] = useState<{ key: SortKey; desc: boolean }>({
    key: 'last',
    desc: true
  });
  const layers = model.grads.layers(track);
  const stats = track.stats;
  if (!layers.length || !stats) {
    return null;
  }
  const rows = layers.map((l, i) => ({
    name: l.name,
    shape: l.params[0] ? `[${l.params[0].shape.join(', ')}]` : '',
    last: wireNumber(stats.last[i + 1]),
    max: stats.max[i + 1] ?? NaN,
    min: stats.min[i + 1] ?? NaN,
    nonfinite: stats.nonfinite[i + 1] ?? 0
  }));
  rows.sort((a, b) => {
    const va = a[sort.key];
    const vb = b[sort.key];
    const c =
      typeof va === 'string'
        ? va.localeCompare(vb as string)
        : (Number.isNaN(va) ? Infinity : va) -
          (Number.isNaN(vb as number) ? Infinity : (vb as number));
    return sort.desc ? -c : c;
  });
  const header = (key: SortKey, label: string, title: string) => (
    <th
      title={title}
      aria-sort={
        sort.key === key ? (sort.desc ? 'descending' : 'ascending') : 'none'
      }
      onClick={() =>
        setSort(s => ({ key, desc: s.key === key ? !s.desc : key !== 'name' }))
      }
    >
      {label}
      {sort.key === key ? (sort.desc ? ' ▾' : ' ▴') : ''}
    </th>
  );
  return (
    <div className="jp-TorchDbg-tableWrap">
      <table className="jp-TorchDbg-table jp-TorchDbg-layerTable">
        <colgroup>
          <col />
          <col className="jp-mod-num" />
          <col className="jp-mod-num" />
          <col className="jp-mod-num" />
          <col className="jp-mod-count" />
        </colgroup>
        <thead>
          <tr>
            {header('name', trans.__('layer'), trans.__('sort by layer'))}
            {header('last', trans.__('last'), trans.__('latest norm'))}
            {header('max', trans.__('max'), trans.__('largest norm'))}
            {header('min', trans.__('min'), trans.__('smallest norm'))}
            {header(
              'nonfinite',
              trans.__('NaN'),
              trans.__('sampled steps with a non-finite (NaN/Inf) norm')
            )}
          </tr>
        </thead>
        <tbody>
          {rows.map(r => (
            <tr key={r.name} className={r.nonfinite ? 'jp-mod-bad' : ''}>
              <td
                className="jp-TorchDbg-layerName"
                title={`${r.name} ${r.shape}`}
              >
                {r.name}
              </td>
              <td title={formatValue(r.last)}>{formatCompact(r.last)}</td>
              <td title={formatValue(r.max)}>{formatCompact(r.max)}</td>
              <td title={formatValue(r.min)}>{formatCompact(r.min)}</td>
              <td>{r.nonfinite}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
