import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect, useState } from 'react';

import { Heatmap } from '../../charts/heatmap';
import { LineChart, seriesColor } from '../../charts/lineChart';
import { useMounted } from '../../charts/useMounted';
import { TorchDbgConnection } from '../../connection/connection';
import { TorchDbgModel } from '../../model/model';
import { IAlertItem, IGradTrack, wireNumber } from '../../protocol/messages';
import { useSignalRender } from '../../sidebar/hooks';
import { formatValue } from '../series/body';
import { download, gradsCsv, gradsJson } from './export';

/** Layers drawn as lines (largest last norm first). */
const TOP_K = 5;

function pct(v: number | null): string {
  return v === null ? '–' : `${(v * 100).toFixed(v < 0.01 ? 2 : 1)}%`;
}

function AlertList(props: {
  alerts: readonly IAlertItem[];
  model: TorchDbgModel;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { alerts, trans } = props;
  if (!alerts.length) {
    return null;
  }
  const recent = alerts.slice(-20).reverse();
  return (
    <ul className="jp-TorchDbg-alerts" aria-label={trans.__('Gradient alarms')}>
      {recent.map(a => (
        <li
          key={a.id}
          className={`jp-TorchDbg-alert jp-mod-${a.severity}`}
          data-kind={a.kind}
        >
          <button
            className="jp-TorchDbg-alertStep"
            title={trans.__('Mark step %1 on the charts', String(a.step))}
            onClick={() => {
              props.model.grads.focusStep = a.step;
            }}
          >
            {trans.__('step %1', String(a.step))}
          </button>
          <span className="jp-TorchDbg-alertText">
            <span className="jp-TorchDbg-alertMessage">{a.message}</span>
            <span className="jp-TorchDbg-alertRemedy">{a.remedy}</span>
          </span>
        </li>
      ))}
    </ul>
  );
}

type SortKey = 'name' | 'last' | 'max' | 'min' | 'nonfinite';

function LayerTable(props: {
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

function TrackView(props: {
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
  const [totalHost, total] = useMounted(
    () =>
      new LineChart({
        series: [{ label: 'total', color: seriesColor(0) }],
        height: 110,
        log: true
      }),
    [track.name]
  );
  const [heatHost, heat] = useMounted(() => new Heatmap(), [track.name]);
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
  // the top-k layers by last norm (non-finite first: that is the news)
  const stats = track.stats;
  const order = layers
    .map((l, i) => ({ l, v: stats ? wireNumber(stats.last[i + 1]) : 0 }))
    .sort((a, b) =>
      !Number.isFinite(a.v) ? -1 : !Number.isFinite(b.v) ? 1 : b.v - a.v
    )
    .slice(0, TOP_K);

  useEffect(() => {
    const totalRing = model.series.get(track.total_series);
    if (totalRing) {
      const { x, y } = totalRing.toArrays();
      total.current?.setData(x, y);
    }
    // the clip level when clipping (the chart shows norms before clipping), else the threshold
    total.current?.setHLine(
      model.control.state?.clip ?? status.thresholds.explode_abs
    );
    total.current?.setMarker(model.grads.focusStep);
    top.current?.setMarker(model.grads.focusStep);
    const rings = layers.map(l => model.series.get(l.series));
    if (rings.length && rings.every(r => r)) {
      const arrays = rings.map(r => r!.toArrays());
      heat.current?.setData(
        arrays[0].x,
        arrays.map(a => a.y)
      );
      const picked = order.map(o => model.series.get(o.l.series)!.toArrays());
      if (picked.length) {
        top.current?.setData(picked[0].x, ...picked.map(p => p.y));
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

  const why: Record<string, string> = {
    warmup: trans.__('every step (auto: first steps of the run)'),
    rising: trans.__('every step (auto: norm climbing)'),
    clip: trans.__('every step (clipping reads it anyway)')
  };
  const stride =
    track.mode === 'off'
      ? trans.__('off')
      : track.every_step
        ? why[track.every_step]
        : track.mode === 'auto'
          ? trans.__('every %1 (auto)', String(track.stride))
          : trans.__('every %1', String(track.stride));
  return (
    <section className="jp-TorchDbg-track" data-track={track.name}>
      <div className="jp-TorchDbg-trackHeader">
        <span className="jp-TorchDbg-trackName">{track.name}</span>
        <span className="jp-TorchDbg-trackMeta">
          {trans.__(
            'step %1 · sampled %2 · overhead %3',
            String(track.step),
            stride,
            pct(track.overhead)
          )}
        </span>
      </div>
      {(track.skipped_steps > 0 || track.local_shard || track.reason) && (
        <div className="jp-TorchDbg-trackNotes">
          {track.skipped_steps > 0 &&
            trans.__(
              '%1 skipped steps (GradScaler) · ',
              String(track.skipped_steps)
            )}
          {track.local_shard && trans.__('norms of the local shard only · ')}
          {track.reason}
        </div>
      )}
      <AlertList
        alerts={model.grads.alerts.filter(a => a.track === track.name)}
        model={model}
        trans={trans}
      />
      <div className="jp-TorchDbg-chartTitle">
        {trans.__('total gradient norm (log)')}
        <span className="jp-TorchDbg-seriesValue">
          {formatValue(stats ? wireNumber(stats.last[0]) : NaN)}
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
            <span className="jp-TorchDbg-layerName">{o.l.name}</span>
            <span>{formatValue(o.v)}</span>
          </li>
        ))}
      </ul>
      <LayerTable model={model} track={track} trans={trans} />
    </section>
  );
}

/** The gradient monitor: per-optimizer charts, alarms, layer table, controls. */
export function GradsPanel(props: {
  model: TorchDbgModel;
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element {
  const { model, conn, trans } = props;
  useSignalRender(model.grads.changed);
  const tick = useSignalRender(model.dataChanged);
  const status = model.grads.status;
  const [note, setNote] = useState('');
  const setStride = (value: string) => {
    const stride = value === 'auto' || value === 'off' ? value : Number(value);
    conn
      .sendAction('set_stride', { stride }, () =>
        setNote(trans.__('pending: applies when the cell ends'))
      )
      .then(
        r => setNote(r.method === 'error' ? r.message : ''),
        e => setNote((e as Error).message)
      );
  };
  if (!status) {
    return (
      <div className="jp-TorchDbg-empty">
        <p>
          {trans.__(
            'The gradient monitor starts at the first optimizer.step() once torch is imported.'
          )}
        </p>
      </div>
    );
  }
  const active = status.tracks.filter(t => t.state !== 'disabled');
  const strideValue =
    status.mode === 'auto'
      ? 'auto'
      : status.mode === 'off'
        ? 'off'
        : String(status.stride ?? 1);
  return (
    <div className="jp-TorchDbg-grads">
      <div className="jp-TorchDbg-controls">
        <label>
          {trans.__('sample')}{' '}
          <select
            className="jp-TorchDbg-stride"
            value={strideValue}
            onChange={e => setStride(e.currentTarget.value)}
          >
            <option value="auto">{trans.__('auto (≤1% overhead)')}</option>
            <option value="1">{trans.__('every step')}</option>
            <option value="10">{trans.__('every 10 steps')}</option>
            <option value="100">{trans.__('every 100 steps')}</option>
            <option value="off">{trans.__('off')}</option>
            {!['auto', 'off', '1', '10', '100'].includes(strideValue) && (
              <option value={strideValue}>
                {trans.__('every %1 steps', strideValue)}
              </option>
            )}
          </select>
        </label>
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          onClick={() =>
            download('grad-norms.csv', gradsCsv(model), 'text/csv')
          }
        >
          CSV
        </button>
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          onClick={() =>
            download('grad-norms.json', gradsJson(model), 'application/json')
          }
        >
          JSON
        </button>
      </div>
      {note && <div className="jp-TorchDbg-note">{note}</div>}
      {status.reason && (
        <p className="jp-TorchDbg-stateText">{status.reason}</p>
      )}
      {active.length === 0 && (
        <p className="jp-TorchDbg-empty">
          {trans.__(
            'No optimizer has stepped yet. Norms appear at the next optimizer.step().'
          )}
        </p>
      )}
      {active.map(track => (
        <TrackView
          key={track.name}
          model={model}
          conn={conn}
          track={track}
          tick={tick}
          trans={trans}
        />
      ))}
    </div>
  );
}
