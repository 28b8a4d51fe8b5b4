import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect } from 'react';

import { LineChart, seriesColor } from '../../charts/lineChart';
import { TorchDbgModel } from '../../model/model';
import { IMemory } from '../../protocol/messages';
import { useMounted } from '../../ui/useMounted';
import { formatBytes } from './format';
import { TIMELINE } from './timeline';

/** The CPU-only state's timeline: this process's resident memory (`host.series`). */
export function RssCard(props: {
  host: IMemory['host'];
  model: TorchDbgModel;
  tick: number;
  trans: TranslationBundle;
}): JSX.Element {
  const { host: h, model, trans } = props;
  const [host, chart] = useMounted(
    () =>
      new LineChart({
        series: [{ label: 'rss', color: seriesColor(0) }],
        height: 100,
        ...TIMELINE
      }),
    [h.series]
  );
  const ring = model.series.get(h.series);
  useEffect(() => {
    if (ring) {
      const { x, y } = ring.toArrays();
      chart.current?.setData(x, y);
    }
  }, [props.tick, ring]);
  return (
    <section
      className="jp-TorchDbg-deviceCard jp-TorchDbg-rssCard"
      data-device="cpu"
      data-series={h.series}
    >
      <header className="jp-TorchDbg-seriesHeader">
        <span className="jp-TorchDbg-seriesName">
          {trans.__('cpu · process RSS')}
        </span>
        <span className="jp-TorchDbg-seriesValue">{formatBytes(h.rss)}</span>
      </header>
      {h.reason && <div className="jp-TorchDbg-note">{h.reason}</div>}
      {!ring && (
        <div className="jp-TorchDbg-note">
          {trans.__('The timeline fills while a cell runs.')}
        </div>
      )}
      <div className="jp-TorchDbg-chartHost" ref={host} />
    </section>
  );
}
