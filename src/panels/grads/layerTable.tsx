import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect, useState } from 'react';

import { TorchDbgModel } from '../../model/model';
import { IGradTrack, wireNumber } from '../../protocol/messages';
import { formatCompact } from '../../ui/formatCompact';
import { formatValue } from '../../ui/formatValue';
import { useShortNames } from '../../ui/useShortNames';

type SortKey = 'name' | 'last' | 'max' | 'min' | 'nonfinite';

/**
 * Below this width (px) each layer takes two lines, its name over its numbers:
 * at a 250 px sidebar four number columns leave a name column of ~8 characters,
 * too few to read a layer by.
 */
export const TWO_LINE_BELOW_PX = 360;

/** The content width of `node`, kept current (0 until measured; jsdom: 0). */
function useWidth(node: HTMLElement | null): number {
  const [width, setWidth] = useState(0);
  useEffect(() => {
    if (!node || typeof ResizeObserver === 'undefined') {
      return;
    }
    const observer = new ResizeObserver(() => setWidth(node.clientWidth));
    observer.observe(node);
    setWidth(node.clientWidth);
    return () => observer.disconnect();
  }, [node]);
  return width;
}

/**
 * Per-layer norms of one track, sortable by any column. Fits a 250 px sidebar:
 * the number columns as wide as their widest number or header (3 significant
 * digits, full value in the tooltip; never cut, never wrapped); the layer names
 * in the rest of the row, or, narrower than TWO_LINE_BELOW_PX, on a line of
 * their own above their numbers; shortened to fit so that no two look alike
 * (`useShortNames`: the shared prefix left out, an ellipsis in the middle; full
 * name and shape in the tooltip).
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
  const [wrap, setWrap] = useState<HTMLElement | null>(null);
  const width = useWidth(wrap);
  const twoLine = width > 0 && width < TWO_LINE_BELOW_PX;
  // the box a name has: the name column, or the whole row when on its own line
  const [nameHeader, setNameHeader] = useState<HTMLElement | null>(null);
  const [nameRow, setNameRow] = useState<HTMLElement | null>(null);
  const short = useShortNames(
    layers.map(l => l.name),
    twoLine ? nameRow : nameHeader
  );
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
  const header = (
    key: SortKey,
    label: string,
    title: string,
    ref?: (el: HTMLElement | null) => void
  ) => (
    <th
      ref={ref}
      className={key === 'name' ? 'jp-TorchDbg-layerName' : 'jp-mod-num'}
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
  const name = (r: (typeof rows)[number], i: number, span?: number) => (
    <td
      className="jp-TorchDbg-layerName"
      colSpan={span}
      ref={span && i === 0 ? setNameRow : undefined}
      data-name={r.name}
      title={`${r.name} ${r.shape}`}
    >
      {short.labels.get(r.name) ?? r.name}
    </td>
  );
  const numbers = (r: (typeof rows)[number]) => (
    <>
      <td className="jp-mod-num" title={formatValue(r.last)}>
        {formatCompact(r.last)}
      </td>
      <td className="jp-mod-num" title={formatValue(r.max)}>
        {formatCompact(r.max)}
      </td>
      <td className="jp-mod-num" title={formatValue(r.min)}>
        {formatCompact(r.min)}
      </td>
      <td className="jp-mod-num">{r.nonfinite}</td>
    </>
  );
  const bad = (r: (typeof rows)[number]) => (r.nonfinite ? 'jp-mod-bad' : '');
  return (
    <div className="jp-TorchDbg-tableWrap" ref={setWrap}>
      <table
        className={`jp-TorchDbg-table jp-TorchDbg-layerTable${
          twoLine ? ' jp-mod-twoLine' : ''
        }`}
      >
        <thead>
          <tr>
            {header(
              'name',
              trans.__('layer'),
              short.prefix
                ? trans.__(
                    'sort by layer (names shown without their shared prefix "%1")',
                    short.prefix
                  )
                : trans.__('sort by layer'),
              setNameHeader
            )}
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
          {rows.map((r, i) =>
            twoLine ? (
              <React.Fragment key={r.name}>
                <tr className={`jp-TorchDbg-layerNameRow ${bad(r)}`}>
                  {name(r, i, 5)}
                </tr>
                <tr className={`jp-TorchDbg-layerNumbers ${bad(r)}`}>
                  <td aria-hidden="true" />
                  {numbers(r)}
                </tr>
              </React.Fragment>
            ) : (
              <tr key={r.name} className={bad(r)}>
                {name(r, i)}
                {numbers(r)}
              </tr>
            )
          )}
        </tbody>
      </table>
    </div>
  );
}
