import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect } from 'react';

import { LineChart, seriesColor } from '../../charts/lineChart';
import { useMounted } from '../../ui/useMounted';
import { formatBytes } from '../memory/format';
import { TIMELINE } from '../memory/timeline';
import { IOpenedRun, IRecordedSeries } from './model';

/** The charts a recorded run shows first: its loss, total gradient norm, memory. */
export const MAX_RECORD_CHARTS = 4;

/**
 * The recorded series worth a chart, in order: logged losses, other logged
 * scalars, the total gradient norm, then the memory timeline (RSS or CUDA
 * allocated). At most `MAX_RECORD_CHARTS`.
 */
export function chartSeries(run: IOpenedRun): IRecordedSeries[] {
  const all = [...run.series.values()].filter(s => s.x.length > 0);
  const rank = (name: string): number => {
    if (/loss/i.test(name) && !name.includes('/')) {
      return 0;
    }
    if (!name.includes('/')) {
      return 1;
    }
    if (name.startsWith('grad/') && /total/.test(name)) {
      return 2;
    }
    if (/^mem\/(cpu\/rss|cuda:\d+\/allocated)$/.test(name)) {
      return 3;
    }
    return 9;
  };
  return all
    .filter(s => rank(s.name) < 9)
    .sort((a, b) => rank(a.name) - rank(b.name) || a.name.localeCompare(b.name))
    .slice(0, MAX_RECORD_CHARTS);
}

/** One recorded series as a small chart (x: steps, or clock time for `mem/`). */
export function RecordChart(props: {
  series: IRecordedSeries;
  trans: TranslationBundle;
}): JSX.Element {
  const { series } = props;
  const memory = series.name.startsWith('mem/');
  const [host, chart] = useMounted(
    () =>
      new LineChart({
        series: [{ label: series.name, color: seriesColor(memory ? 2 : 0) }],
        height: 80,
        ...(memory ? TIMELINE : {})
      }),
    [series]
  );
  useEffect(() => {
    chart.current?.setData(series.x, series.y);
  }, [series, chart.current]);
  const last = series.y.length ? series.y[series.y.length - 1] : NaN;
  return (
    <section className="jp-TorchDbg-recordChart" data-series={series.name}>
      <header className="jp-TorchDbg-seriesHeader">
        <span className="jp-TorchDbg-seriesName" title={series.name}>
          {series.name}
        </span>
        <span className="jp-TorchDbg-seriesValue">
          {memory ? formatBytes(last) : formatLast(last)}
        </span>
      </header>
      <div className="jp-TorchDbg-chartHost" ref={host} />
    </section>
  );
}

function formatLast(v: number): string {
  if (Number.isNaN(v)) {
    return 'NaN';
  }
  if (!Number.isFinite(v)) {
    return v > 0 ? '+Inf' : '-Inf';
  }
  return String(Number(v.toPrecision(4)));
}
