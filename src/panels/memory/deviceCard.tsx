import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect } from 'react';

import { LineChart, seriesColor } from '../../charts/lineChart';
import { TorchDbgModel } from '../../model/model';
import { IMemoryDevice } from '../../protocol/messages';
import { useMounted } from '../../ui/useMounted';
import { formatBytes } from './format';
import { TIMELINE } from './timeline';

/** One CUDA device: allocator and NVML figures, and their timeline. */
export function DeviceCard(props: {
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
          { label: 'nvml used', color: seriesColor(4) },
          { label: 'peak in interval', color: seriesColor(3) }
        ],
        height: 100,
        ...TIMELINE
      }),
    [d.device]
  );
  useEffect(() => {
    const peak = (d.series as { peak_interval?: string }).peak_interval;
    const names = [
      d.series.allocated,
      d.series.reserved,
      d.series.nvml_used,
      peak ?? ''
    ];
    const rings = names.map(n => model.series.get(n));
    const first = rings.find(r => r);
    if (first) {
      // ring views read when drawn (in view only): no copies per message
      chart.current?.setSource(() => {
        const x = first.view().x;
        return {
          x,
          ys: rings.map(r =>
            r ? r.view().y : new Float32Array(x.length).fill(NaN)
          )
        };
      });
    }
  }, [props.tick]);
  const a = d.allocator;
  const n = d.nvml;
  return (
    <section className="jp-TorchDbg-deviceCard" data-device={d.device}>
      <header className="jp-TorchDbg-seriesHeader">
        <span
          className="jp-TorchDbg-seriesName jp-TorchDbg-deviceTitle"
          title={`${d.device} ${d.name ?? ''}`}
        >
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
      {d.peak_note && (
        <div className="jp-TorchDbg-muted jp-TorchDbg-peakNote">
          {d.peak_note}
        </div>
      )}
    </section>
  );
}
