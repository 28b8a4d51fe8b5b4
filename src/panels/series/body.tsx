import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect, useRef } from 'react';

import { LineChart, seriesColor } from '../../charts/lineChart';
import { TorchDbgModel } from '../../model/model';
import { SeriesRing } from '../../model/ringbuffer';
import { useSignalRender } from '../../sidebar/hooks';

/**
 * Names under `grad/` and `param/` (gradient monitor) and `mem/` (memory) are
 * shown in their own sections, not as `log()` series.
 */
export function isMonitorSeries(name: string): boolean {
  return (
    name.startsWith('grad/') ||
    name.startsWith('param/') ||
    name.startsWith('mem/')
  );
}

/** Format a value for the card header: short, and honest about NaN/Inf. */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) {
    return 'NaN';
  }
  if (!Number.isFinite(v)) {
    return v > 0 ? '+Inf' : '-Inf';
  }
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) {
    return v.toExponential(3);
  }
  return v.toPrecision(4);
}

/** One series: its name, last value and a live chart. */
function SeriesCard(props: {
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

/** The logged series of the current kernel, one live chart each. */
export function SeriesPanel(props: {
  model: TorchDbgModel;
  trans: TranslationBundle;
}): JSX.Element {
  const tick = useSignalRender(props.model.dataChanged);
  const { trans } = props;
  const entries = [...props.model.series.entries()].filter(
    ([name]) => !isMonitorSeries(name)
  );
  if (entries.length === 0) {
    return (
      <div className="jp-TorchDbg-empty jp-TorchDbg-seriesEmpty">
        <p>{trans.__('Nothing logged yet. In your training loop:')}</p>
        <pre className="jp-TorchDbg-code">
          {'from jupyterlab_torchdbg import log\n…\nlog(loss=loss)'}
        </pre>
        <p>
          {trans.__('Each name becomes a live chart here while the cell runs.')}
        </p>
      </div>
    );
  }
  return (
    <div className="jp-TorchDbg-seriesList">
      {entries.map(([name, ring], i) => (
        <SeriesCard
          key={name}
          name={name}
          ring={ring}
          index={i}
          tick={tick}
          trans={trans}
        />
      ))}
    </div>
  );
}
