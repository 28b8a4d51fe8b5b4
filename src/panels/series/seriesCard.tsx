import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect, useRef } from 'react';

import { LineChart, seriesColor } from '../../charts/lineChart';
import { SeriesRing } from '../../model/ringbuffer';
import { formatValue } from '../../ui/formatValue';

/** One series: its name, last value and a live chart. */
export function SeriesCard(props: {
  name: string;
  ring: SeriesRing;
  index: number;
  tick: number;
  trans: TranslationBundle;
}): JSX.Element {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<LineChart | null>(null);
  useEffect(() => {
    const c = new LineChart({
      series: [{ label: props.name, color: seriesColor(props.index) }],
      height: 120
    });
    chart.current = c;
    host.current?.appendChild(c.node);
    return () => {
      c.dispose();
      c.node.remove();
      chart.current = null;
    };
  }, [props.name, props.index]);
  useEffect(() => {
    const { x, y } = props.ring.toArrays();
    chart.current?.setData(x, y);
  }, [props.tick, props.ring]);
  const { trans } = props;
  return (
    <section className="jp-TorchDbg-seriesCard" data-series={props.name}>
      <header className="jp-TorchDbg-seriesHeader">
        <span
          className="jp-TorchDbg-swatch"
          style={{ background: seriesColor(props.index) }}
        />
        <span className="jp-TorchDbg-seriesName" title={props.name}>
          {props.name}
        </span>
        <span className="jp-TorchDbg-seriesValue">
          {formatValue(props.ring.last)}
        </span>
      </header>
      <div className="jp-TorchDbg-chartHost" ref={host} />
      <footer className="jp-TorchDbg-seriesFooter">
        {trans.__(
          'step %1 · %2 points',
          Number.isFinite(props.ring.lastX) ? String(props.ring.lastX) : '–',
          String(props.ring.total)
        )}
      </footer>
    </section>
  );
}
