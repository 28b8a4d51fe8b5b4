import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect, useState } from 'react';

import { LineChart, seriesColor } from '../../charts/lineChart';
import { useMounted } from '../../charts/useMounted';
import { TorchDbgConnection } from '../../connection/connection';
import { TorchDbgModel } from '../../model/model';
import {
  ActionName,
  IActionArgs,
  IMemory,
  IMemoryBreakdownRow,
  IMemoryDevice,
  IOom
} from '../../protocol/messages';
import { useSignalRender } from '../../sidebar/hooks';
import { RichText } from '../exception/body';
import { formatBytes } from './format';
import { SnapshotSummary } from './snapshot';

export { formatBytes } from './format';

const CATEGORIES: {
  key: keyof IMemoryBreakdownRow;
  label: string;
  color: number;
}[] = [
  { key: 'parameters', label: 'parameters', color: 0 },
  { key: 'gradients', label: 'gradients', color: 1 },
  { key: 'optimizer_state', label: 'optimizer state', color: 2 },
  { key: 'other', label: 'everything else', color: 4 }
];

/** The breakdown of one device as a stacked bar with a legend. */
function BreakdownBar(props: {
  row: IMemoryBreakdownRow;
  trans: TranslationBundle;
}): JSX.Element {
  const { row, trans } = props;
  const values = CATEGORIES.map(c => Math.max(0, Number(row[c.key] ?? 0)));
  const sum = values.reduce((a, b) => a + b, 0) || 1;
  return (
    <div className="jp-TorchDbg-breakdown" data-device={row.device}>
      <div className="jp-TorchDbg-chartTitle">
        {trans.__('%1 · total %2', row.device, formatBytes(row.total))}
        <span>
          {row.total_source === 'rss' ? trans.__('(process RSS)') : ''}
        </span>
      </div>
      <div
        className="jp-TorchDbg-bar"
        role="img"
        aria-label={trans.__('memory breakdown')}
      >
        {CATEGORIES.map((c, i) => (
          <span
            key={c.key}
            style={{
              width: `${(100 * values[i]) / sum}%`,
              background: seriesColor(c.color)
            }}
          />
        ))}
      </div>
      <ul className="jp-TorchDbg-legend">
        {CATEGORIES.map((c, i) => (
          <li key={c.key}>
            <span
              className="jp-TorchDbg-swatch"
              style={{ background: seriesColor(c.color) }}
            />
            <span className="jp-TorchDbg-layerName">{trans.__(c.label)}</span>
            <span>
              {formatBytes(c.key === 'other' ? row.other : values[i])}
            </span>
          </li>
        ))}
      </ul>
    </div>
  );
}

/** Memory timelines: x is Unix time in seconds, y bytes. */
const TIMELINE = {
  time: true,
  yFormat: (v: number) => formatBytes(v),
  ySize: 64 // "1023 MiB"
};

function DeviceCard(props: {
  device: IMemoryDevice;
  model: TorchDbgModel;
  tick: number;
  trans: TranslationBundle;
}): JSX.Element {
  const { device: d, model, trans } = props;
  const [host, chart] = useMounted(
    () =>
      new LineChart({
        series: [
          { label: 'allocated', color: seriesColor(0) },
          { label: 'reserved', color: seriesColor(1) },
          { label: 'nvml used', color: seriesColor(4) }
        ],
        height: 100,
        ...TIMELINE
      }),
    [d.device]
  );
  useEffect(() => {
    const names = [d.series.allocated, d.series.reserved, d.series.nvml_used];
    const rings = names.map(n => model.series.get(n));
    const first = rings.find(r => r);
    if (first) {
      const x = first.toArrays().x;
      chart.current?.setData(
        x,
        ...rings.map(r =>
          r ? r.toArrays().y : new Float32Array(x.length).fill(NaN)
        )
      );
    }
  }, [props.tick]);
  const a = d.allocator;
  const n = d.nvml;
  return (
    <section className="jp-TorchDbg-deviceCard" data-device={d.device}>
      <header className="jp-TorchDbg-seriesHeader">
        <span className="jp-TorchDbg-seriesName">
          {d.device} {d.name ?? ''}
        </span>
      </header>
      <div className="jp-TorchDbg-deviceFacts">
        <span>{trans.__('allocated %1', formatBytes(a?.allocated))}</span>
        <span>{trans.__('reserved %1', formatBytes(a?.reserved))}</span>
        <span>{trans.__('peak %1', formatBytes(a?.peak))}</span>
        <span>
          {trans.__(
            'used %1 / %2',
            formatBytes(n?.used),
            formatBytes(n?.total)
          )}
        </span>
        <span>
          {trans.__(
            'util %1 · %2 · this kernel %3',
            n?.util_gpu === null || n?.util_gpu === undefined
              ? 'n/a'
              : `${n.util_gpu}%`,
            n?.temperature_c === null || n?.temperature_c === undefined
              ? 'n/a'
              : `${n.temperature_c}°C`,
            formatBytes(n?.process_used)
          )}
        </span>
      </div>
      {(d.allocator_reason || d.nvml_reason) && (
        <div className="jp-TorchDbg-note">
          {[d.allocator_reason, d.nvml_reason].filter(Boolean).join(' · ')}
        </div>
      )}
      <div className="jp-TorchDbg-chartHost" ref={host} />
    </section>
  );
}

/** The CPU-only state's timeline: this process's resident memory (`host.series`). */
function RssCard(props: {
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

function OomView(props: { oom: IOom; trans: TranslationBundle }): JSX.Element {
  const { oom, trans } = props;
  const [showSummary, setShowSummary] = useState(false);
  return (
    <div className="jp-TorchDbg-oom" data-oom-id={oom.id}>
      <div className="jp-TorchDbg-excTitle">
        {trans.__('Out of memory on %1', oom.device)}
      </div>
      <p className="jp-TorchDbg-headline">
        <RichText text={oom.headline} />
      </p>
      <ol className="jp-TorchDbg-remedies">
        {oom.remedies.map((r, i) => (
          <li key={i} data-kind={r.kind}>
            <strong>{r.title}</strong> <RichText text={r.detail} />
            {r.code && <pre className="jp-TorchDbg-code">{r.code}</pre>}
          </li>
        ))}
      </ol>
      {oom.tensors.length > 0 && (
        <>
          <div className="jp-TorchDbg-chartTitle">
            {trans.__(
              'largest live tensors (%1 of %2, %3)',
              String(oom.tensors.length),
              String(oom.tensors_total),
              formatBytes(oom.tensors_bytes)
            )}
          </div>
          <div className="jp-TorchDbg-tableWrap">
            <table className="jp-TorchDbg-table jp-TorchDbg-oomTensors">
              <tbody>
                {oom.tensors.map((t, i) => (
                  <tr key={i}>
                    <td
                      className="jp-TorchDbg-localName"
                      title={t.also.join(', ')}
                    >
                      {t.name}
                    </td>
                    <td>{`${t.dtype}[${t.shape.join(', ')}]`}</td>
                    <td>{formatBytes(t.nbytes)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
      {oom.summary && (
        <>
          <button
            className="jp-TorchDbg-link"
            onClick={() => setShowSummary(s => !s)}
          >
            {showSummary
              ? trans.__('hide memory_summary()')
              : trans.__('show memory_summary()')}
          </button>
          {showSummary && (
            <pre className="jp-TorchDbg-source">{oom.summary}</pre>
          )}
        </>
      )}
    </div>
  );
}

/** Memory: device timelines and cards, the breakdown, one-click remedies, OOM autopsy. */
export function MemoryPanel(props: {
  model: TorchDbgModel;
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element {
  const { model, conn, trans } = props;
  const mem = model.memory;
  useSignalRender(mem.changed);
  const tick = useSignalRender(model.dataChanged);
  const [note, setNote] = useState('');
  const status = mem.status;
  const act = <K extends ActionName>(
    action: K,
    args: IActionArgs[K],
    describe: (r: any) => string
  ) => {
    setNote('');
    conn.sendAction(action, args).then(
      r => setNote(r.method === 'error' ? r.message : describe(r.result)),
      e => setNote((e as Error).message)
    );
  };
  if (!status) {
    return (
      <div className="jp-TorchDbg-empty">
        <p>
          {trans.__(
            'Memory figures appear once torch is imported in the kernel.'
          )}
        </p>
      </div>
    );
  }
  const cuda = status.state === 'active' || status.state === 'corrupted';
  const recording = status.recording.state !== 'off';
  // no device card to show: the process RSS gets the timeline instead
  const cpuOnly = status.devices.length === 0;
  return (
    <div className="jp-TorchDbg-memory" data-state={status.state}>
      {status.state !== 'active' && (
        <p className="jp-TorchDbg-stateText">
          {status.reason ??
            (status.state === 'no_cuda'
              ? trans.__('No CUDA device: showing this process (CPU) only.')
              : status.state === 'cuda_idle'
                ? trans.__('CUDA is not initialised by your code yet.')
                : status.state === 'corrupted'
                  ? trans.__(
                      'The CUDA context is corrupted (a device-side error): restart the kernel.'
                    )
                  : trans.__('Waiting for torch.'))}
        </p>
      )}
      <div className="jp-TorchDbg-controls">
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          disabled={!cuda}
          title={cuda ? '' : trans.__('Needs CUDA in use by this kernel')}
          onClick={() =>
            act('empty_cache', {}, r =>
              trans.__('Cache emptied: %1', JSON.stringify(r))
            )
          }
        >
          {trans.__('Empty cache')}
        </button>
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          title={trans.__(
            'Drop what keeps the last error alive, gc, empty the cache (ends %debug)'
          )}
          onClick={() =>
            act('release_refs', {}, r =>
              typeof r?.note === 'string'
                ? r.note
                : trans.__('References released.')
            )
          }
        >
          {trans.__('Release references')}
        </button>
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          disabled={!cuda && !recording}
          onClick={() =>
            act(
              'record_memory',
              recording ? { op: 'stop' } : { op: 'start' },
              r =>
                typeof r?.file === 'string'
                  ? trans.__(
                      'Memory snapshot saved: its top allocation sites are below.'
                    )
                  : typeof r?.note === 'string'
                    ? r.note
                    : trans.__('Recording memory history.')
            )
          }
        >
          {recording ? trans.__('Stop recording') : trans.__('Record history')}
        </button>
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          onClick={() =>
            act('save_checkpoint', {}, r =>
              trans.__(
                'Checkpoint saved: %1',
                String(r?.file ?? r?.filename ?? '')
              )
            )
          }
        >
          {trans.__('Save checkpoint')}
        </button>
      </div>
      {note && <div className="jp-TorchDbg-note">{note}</div>}
      {mem.oom && <OomView oom={mem.oom} trans={trans} />}
      {status.devices.map(d => (
        <DeviceCard
          key={d.device}
          device={d}
          model={model}
          tick={tick}
          trans={trans}
        />
      ))}
      {cpuOnly && (
        <RssCard host={status.host} model={model} tick={tick} trans={trans} />
      )}
      {status.breakdown?.devices.map(row => (
        <BreakdownBar key={row.device} row={row} trans={trans} />
      ))}
      {status.breakdown?.reason && (
        <p className="jp-TorchDbg-muted">{status.breakdown.reason}</p>
      )}
      {status.breakdown?.note && (
        <p className="jp-TorchDbg-muted jp-TorchDbg-breakdownNote">
          {status.breakdown.note}
        </p>
      )}
      {status.recording.last && (
        <SnapshotSummary snap={status.recording.last} trans={trans} />
      )}
      <div className="jp-TorchDbg-muted">
        {[
          cpuOnly
            ? ''
            : trans.__('process RSS %1', formatBytes(status.host.rss)),
          status.nvml.available
            ? ''
            : (status.nvml.reason ?? trans.__('NVML unavailable'))
        ]
          .filter(Boolean)
          .join(' · ')}
      </div>
    </div>
  );
}
