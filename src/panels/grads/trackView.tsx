import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect, useState } from 'react';

import { Heatmap } from '../../charts/heatmap';
import { LineChart, seriesColor } from '../../charts/lineChart';
import { TorchDbgConnection } from '../../connection/connection';
import { TorchDbgModel } from '../../model/model';
import { IGradTrack, wireNumber } from '../../protocol/messages';
import { formatValue } from '../../ui/formatValue';
import { useMounted } from '../../ui/useMounted';
import { useShortNames } from '../../ui/useShortNames';
import { AlertList } from './alertList';
import { LayerTable } from './layerTable';
import { TrackHeader } from './trackHeader';

/** Layers drawn as lines (largest last norm first). */
const TOP_K = 5;

/**
 * One optimizer's gradients: total norm, per-layer heatmap, top layers, alarms
 * and the layer table.
 */
export function TrackView(props: {
  model: TorchDbgModel;
  conn: TorchDbgConnection;
  track: IGradTrack;
  tick: number;
  trans: TranslationBundle;
}): JSX.Element {
  const { model, track, trans } = props;
  const status = model.grads.status!;
  const layers = model.grads.layers(track);
  const [hover, setHover] = useState<string>('');
  // the legend's layer names, shortened to its width so that none look alike
  const [legendName, setLegendName] = useState<HTMLElement | null>(null);
  const legendNames = useShortNames(
    layers.map(l => l.name),
    legendName
  );
  const [totalHost, total] = useMounted(
    () =>
      new LineChart({
        series: [{ label: 'total', color: seriesColor(0) }],
        height: 110,
        log: true
      }),
    [track.name]
  );
  const [heatHost, heat] = useMounted(
    () =>
      new Heatmap({
        scaleTitle: trans.__(
          'colour scale: gradient norm, logarithmic (min at the left, max at the right)'
        ),
        nonFiniteLabel: trans.__('non-finite')
      }),
    [track.name]
  );
  const [topHost, top] = useMounted(
    () =>
      new LineChart({
        series: Array.from({ length: TOP_K }, (_, i) => ({
          label: String(i),
          color: seriesColor(i + 1)
        })),
        height: 110,
        log: true
      }),
    [track.name]
  );
  const stats = track.stats;
  // the step and the total norm as fresh as the stream (the status comes every 2 s)
  const totalRing = model.series.get(track.total_series);
  const liveStep = Math.max(
    track.step,
    totalRing && totalRing.length ? totalRing.lastX : 0
  );
  const liveTotal =
    totalRing && totalRing.length
      ? totalRing.last
      : stats
        ? wireNumber(stats.last[0])
        : NaN;
  // the top-k layers by last norm (non-finite first: that is the news)
  const order = layers
    .map((l, i) => ({ l, v: stats ? wireNumber(stats.last[i + 1]) : 0 }))
    .sort((a, b) =>
      !Number.isFinite(a.v) ? -1 : !Number.isFinite(b.v) ? 1 : b.v - a.v
    )
    .slice(0, TOP_K);

  // earlier runs' total norm, faded (the same array while unchanged)
  const totalOverlays = model.overlayData(track.total_series);
  const shownLabel = trans.__('run %1', String(model.runs.shown));
  useEffect(() => {
    total.current?.setOverlays(totalOverlays, shownLabel, runs =>
      trans.__('%1 (faded)', runs)
    );
  }, [totalOverlays, shownLabel, track.name]);

  // an alarm clicked (alertList.tsx): mark its step at once, data or not
  useEffect(() => {
    total.current?.setMarker(model.grads.focusStep);
    top.current?.setMarker(model.grads.focusStep);
  }, [model.grads.focusStep, track.name]);

  useEffect(() => {
    if (totalRing) {
      total.current?.setRing(totalRing); // read in place when drawn
    }
    // the clip level when clipping (the chart shows norms before clipping), else the threshold
    total.current?.setHLine(
      model.control.state?.clip ?? status.thresholds.explode_abs
    );
    total.current?.setMarker(model.grads.focusStep);
    top.current?.setMarker(model.grads.focusStep);
    const rings = layers.map(l => model.series.get(l.series));
    if (rings.length && rings.every(r => r)) {
      // ring views read when drawn (in view only): no copies per message
      heat.current?.setSource(() => {
        const views = rings.map(r => r!.view());
        return { x: views[0].x, rows: views.map(v => v.y) };
      });
      const picked = order.map(o => model.series.get(o.l.series)!);
      if (picked.length) {
        top.current?.setSource(() => {
          const views = picked.map(r => r.view());
          return { x: views[0].x, ys: views.map(v => v.y) };
        });
      }
    }
  }, [props.tick]);

  useEffect(() => {
    if (heat.current) {
      heat.current.onHover = hit =>
        setHover(
          hit
            ? trans.__(
                '%1 · step %2 · %3',
                layers[hit.row]?.name ?? '?',
                String(hit.x),
                formatValue(hit.value)
              )
            : ''
        );
    }
  }, [layers]);

  return (
    <section className="jp-TorchDbg-track" data-track={track.name}>
      <TrackHeader track={track} liveStep={liveStep} trans={trans} />
      <AlertList
        alerts={model.grads.alerts.filter(a => a.track === track.name)}
        model={model}
        conn={props.conn}
        trans={trans}
      />
      <div className="jp-TorchDbg-chartTitle">
        {trans.__('total gradient norm (log)')}
        <span className="jp-TorchDbg-seriesValue">
          {formatValue(liveTotal)}
        </span>
      </div>
      <div className="jp-TorchDbg-chartHost" ref={totalHost} />
      <div className="jp-TorchDbg-chartTitle">
        {trans.__(
          'per-layer norms (rows: %1 layers, log colour)',
          String(layers.length)
        )}
      </div>
      <div className="jp-TorchDbg-heatHost" ref={heatHost} />
      <div className="jp-TorchDbg-hover">{hover || '\u00a0'}</div>
      <div className="jp-TorchDbg-chartTitle">
        {trans.__('top %1 layers', String(order.length))}
      </div>
      <div className="jp-TorchDbg-chartHost" ref={topHost} />
      <ul className="jp-TorchDbg-legend">
        {order.map((o, i) => (
          <li key={o.l.name}>
            <span
              className="jp-TorchDbg-swatch"
              style={{ background: seriesColor(i + 1) }}
            />
            <span
              className="jp-TorchDbg-layerName"
              ref={i === 0 ? setLegendName : undefined}
              title={o.l.name}
            >
              {legendNames.labels.get(o.l.name) ?? o.l.name}
            </span>
            <span className="jp-TorchDbg-legendValue">{formatValue(o.v)}</span>
          </li>
        ))}
      </ul>
      <LayerTable model={model} track={track} trans={trans} />
    </section>
  );
}
