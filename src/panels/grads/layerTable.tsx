import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { TorchDbgModel } from '../../model/model';
import { IGradTrack, wireNumber } from '../../protocol/messages';
import { formatValue } from '../../ui/formatValue';

type SortKey = 'name' | 'last' | 'max' | 'min' | 'nonfinite';

/** Per-layer norms of one track, sortable by any column. */
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
  const header = (key: SortKey, label: string) => (
    <th
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
        <thead>
          <tr>
            {header('name', trans.__('layer'))}
            {header('last', trans.__('last'))}
            {header('max', trans.__('max'))}
            {header('min', trans.__('min'))}
            {header('nonfinite', trans.__('non-finite'))}
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
              <td>{formatValue(r.last)}</td>
              <td>{formatValue(r.max)}</td>
              <td>{formatValue(r.min)}</td>
              <td>{r.nonfinite}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
