import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useMemo } from 'react';

import { formatCompact } from '../../ui/formatCompact';
import { formatSeconds } from './format';
import { RankRows } from './grid';
import { type RankNow, RanksModel } from './model';
import {
  heatLayout,
  heatScale,
  IOutlier,
  LEVELS,
  normOf,
  OutlierReason,
  pickOutliers
} from './scale';

/** The heatmaps' width in px: a 250 px sidebar less its paddings. */
export const HEAT_WIDTH = 208;

/** Why an outlier is shown, as its tag (null: the state badge says it). */
export function reasonLabel(
  reason: OutlierReason,
  trans: TranslationBundle
): string | null {
  switch (reason) {
    case 'slowest':
      return trans.__('slowest');
    case 'highest_norm':
      return trans.__('highest norm');
    case 'lowest_norm':
      return trans.__('lowest norm');
    case 'non_finite':
      return trans.__('non-finite norm');
    default:
      return null;
  }
}

/**
 * Many ranks: the outliers as grid rows (a handful), then a heatmap of step
 * time and one of gradient norm, a cell per rank in rank order. Computed only
 * when the ranks change (one `ranks` message), never per frame.
 */
export function RankScale(props: {
  model: RanksModel;
  trans: TranslationBundle;
}): JSX.Element {
  const { model, trans } = props;
  const ranks = model.ranks;
  const alarms = model.alarms;
  const outliers: IOutlier[] = useMemo(
    () => pickOutliers(ranks, r => model.trouble(r)),
    [ranks, alarms]
  );
  const byRank = new Map(ranks.map(r => [r.identity.rank, r]));
  const shown = outliers
    .map(o => byRank.get(o.rank))
    .filter((r): r is RankNow => r !== undefined);
  const reasons = new Map<number, string>();
  for (const o of outliers) {
    const label = reasonLabel(o.reason, trans);
    if (label !== null) {
      reasons.set(o.rank, label);
    }
  }
  return (
    <div className="jp-TorchDbg-rankScale" data-ranks={ranks.length}>
      <div className="jp-TorchDbg-rankScaleHead">
        {outliers.length
          ? trans.__('%1 ranks; outliers first', String(ranks.length))
          : trans.__('%1 ranks; none stands out', String(ranks.length))}
      </div>
      {shown.length > 0 && (
        <RankRows model={model} trans={trans} ranks={shown} reasons={reasons} />
      )}
      <RankHeatmap
        ranks={ranks}
        metric="time"
        label={trans.__('step time')}
        value={r => r.step_time_s}
        format={v => formatSeconds(v)}
        trans={trans}
      />
      <RankHeatmap
        ranks={ranks}
        metric="norm"
        label={trans.__('gradient norm')}
        value={normOf}
        format={v => formatCompact(v, 2)}
        trans={trans}
      />
    </div>
  );
}

/** One heatmap: an SVG cell per rank with its tooltip, and a legend. */
export function RankHeatmap(props: {
  ranks: readonly RankNow[];
  metric: string;
  label: string;
  value: (r: RankNow) => number | null;
  format: (v: number) => string;
  trans: TranslationBundle;
}): JSX.Element {
  const { ranks, metric, label, value, format, trans } = props;
  const values = ranks.map(value);
  const scale = heatScale(values);
  const layout = heatLayout(ranks.length, HEAT_WIDTH);
  const c = layout.cell;
  return (
    <figure
      className="jp-TorchDbg-rankHeat"
      data-metric={metric}
      aria-label={trans.__('%1 by rank', label)}
    >
      <figcaption className="jp-TorchDbg-rankHeatLegend">
        <span>{label}</span>
        <span className="jp-TorchDbg-rankHeatLow">
          {scale.lo === null ? '—' : format(scale.lo)}
        </span>
        <span className="jp-TorchDbg-rankHeatRamp" aria-hidden="true">
          {Array.from({ length: LEVELS }, (_, i) => (
            <i key={i} className={`jp-mod-level${i}`} />
          ))}
        </span>
        <span className="jp-TorchDbg-rankHeatHigh">
          {scale.hi === null ? '—' : format(scale.hi)}
        </span>
      </figcaption>
      <svg
        className="jp-TorchDbg-rankHeatCells"
        viewBox={`0 0 ${layout.width} ${layout.height}`}
        width={layout.width}
        height={layout.height}
        role="img"
      >
        {ranks.map((r, i) => {
          const v = values[i];
          const level = scale.level(v);
          const cls =
            level === null
              ? 'jp-mod-none'
              : level === 'bad'
                ? 'jp-mod-bad'
                : `jp-mod-level${level}`;
          const x = (i % layout.cols) * c;
          const y = Math.floor(i / layout.cols) * c;
          const norm = normOf(r);
          const tip = trans.__(
            'rank %1: %2/step, norm %3',
            String(r.identity.rank),
            formatSeconds(r.step_time_s),
            norm === null ? '—' : formatCompact(norm, 2)
          );
          return (
            <rect
              key={r.identity.rank}
              className={cls}
              data-rank={r.identity.rank}
              x={x}
              y={y}
              width={c - 1}
              height={c - 1}
            >
              <title>{`${tip} (${r.state})`}</title>
            </rect>
          );
        })}
      </svg>
    </figure>
  );
}
