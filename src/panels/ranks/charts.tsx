import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect } from 'react';

import { LineChart, seriesColor } from '../../charts/lineChart';
import { useMounted } from '../../ui/useMounted';
import { formatSeconds } from './format';
import { IRankSeries, RanksModel } from './model';

/** Ranks drawn as lines (beyond this many, lines are noise: the grid names the odd one). */
export const MAX_DRAWN_RANKS = 16;

/**
 * Several ranks' values on one shared x (the union of their steps, merged in
 * order): a rank without a point at a step has NaN there (a gap). Ranks
 * sample the same steps (a power-of-two stride), so gaps are rare.
 */
export function alignRanks(
  series: readonly IRankSeries[],
  pick: (s: IRankSeries) => readonly number[]
): { x: number[]; ys: number[][] } {
  const x: number[] = [];
  const ys: number[][] = series.map(() => []);
  const at = series.map(() => 0);
  for (;;) {
    let next = Infinity;
    series.forEach((s, k) => {
      if (at[k] < s.steps.length && s.steps[at[k]] < next) {
        next = s.steps[at[k]];
      }
    });
    if (next === Infinity) {
      break;
    }
    x.push(next);
    series.forEach((s, k) => {
      if (at[k] < s.steps.length && s.steps[at[k]] === next) {
        ys[k].push(pick(s)[at[k]]);
        at[k]++;
      } else {
        ys[k].push(NaN);
      }
    });
  }
  return { x, ys };
}

/** One chart of a per-rank value against the step, one line per rank. */
function RankChart(props: {
  model: RanksModel;
  ranks: number[];
  pick: (s: IRankSeries) => readonly number[];
  log: boolean;
  yFormat?: (v: number) => string;
  className: string;
}): JSX.Element {
  const { model, ranks, pick } = props;
  const key = ranks.join(',');
  const [host, chart] = useMounted(
    () =>
      new LineChart({
        series: ranks.map(r => ({
          label: `rank ${r}`,
          color: seriesColor(r)
        })),
        height: 100,
        log: props.log,
        ...(props.yFormat ? { yFormat: props.yFormat, ySize: 56 } : {})
      }),
    [key]
  );
  useEffect(() => {
    // read when drawn (in view only): nothing is aligned for a hidden chart
    chart.current?.setSource(() => {
      const series = ranks
        .map(r => model.seriesOf(r))
        .filter((s): s is IRankSeries => !!s);
      return series.length === ranks.length ? alignRanks(series, pick) : null;
    });
  }, [model.version, key]);
  return (
    <div
      className={`jp-TorchDbg-chartHost jp-TorchDbg-rankChart ${props.className}`}
      ref={host}
    />
  );
}

/**
 * The per-rank charts: gradient norm against the step (one line per rank, in
 * the palette's colours: after DDP's all-reduce they lie on top of each other,
 * and a desynced rank's line leaves the others) and the step time.
 */
export function RankCharts(props: {
  model: RanksModel;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { model, trans } = props;
  const all = model.series.map(s => s.rank);
  if (all.length === 0) {
    return null;
  }
  const ranks = all.slice(0, MAX_DRAWN_RANKS);
  return (
    <div className="jp-TorchDbg-rankCharts">
      <div className="jp-TorchDbg-chartTitle">
        {model.job?.sharded
          ? trans.__('shard gradient norm by rank')
          : trans.__('gradient norm by rank')}
      </div>
      <RankChart
        model={model}
        ranks={ranks}
        pick={s => s.gradNorm}
        log={true}
        className="jp-TorchDbg-rankGradChart"
      />
      <div
        className="jp-TorchDbg-chartTitle"
        title={trans.__(
          'Wall time per step, logarithmic: a paused step and a straggler stand out without flattening the rest'
        )}
      >
        {trans.__('step time by rank')}
      </div>
      <RankChart
        model={model}
        ranks={ranks}
        pick={s => s.stepTime}
        log={true}
        yFormat={formatSeconds}
        className="jp-TorchDbg-rankTimeChart"
      />
      <ul className="jp-TorchDbg-legend jp-TorchDbg-rankLegend">
        {ranks.map(r => (
          <li key={r}>
            <span
              className="jp-TorchDbg-swatch"
              style={{ background: seriesColor(r) }}
            />
            {trans.__('rank %1', String(r))}
          </li>
        ))}
      </ul>
      {all.length > ranks.length && (
        <div className="jp-TorchDbg-note">
          {trans.__(
            'Ranks 0–%1 drawn (of %2).',
            String(ranks[ranks.length - 1]),
            String(all.length)
          )}
        </div>
      )}
    </div>
  );
}
