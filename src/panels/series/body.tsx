import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { TorchDbgModel } from '../../model/model';
import { useSignalRender } from '../../ui/useSignalRender';
import { SeriesCard } from './seriesCard';

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
