import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { ActionService, outcomeNote } from '../../connection/actions';
import { TorchDbgConnection } from '../../connection/connection';
import { availability } from '../../model/availability';
import { TorchDbgModel } from '../../model/model';
import { ActionName, ActionResult, IActionArgs } from '../../protocol/messages';
import { useLiveTick } from '../../charts/live';
import { useSignalRender } from '../../ui/useSignalRender';
import { BreakdownBar } from './breakdownBar';
import { DeviceCard } from './deviceCard';
import { formatBytes } from './format';
import { ActivationsView } from './activations';
import { GuardRow, LeakCard } from './leakCard';
import { OomView } from './oomView';
import { RssCard } from './rssCard';
import { RemedyButtons } from './remedyButtons';
import { SnapshotSummary } from './snapshot';

export { formatBytes };

/** Memory: device timelines and cards, the breakdown, one-click remedies, OOM autopsy. */
export function MemoryPanel(props: {
  model: TorchDbgModel;
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element {
  const { model, conn, trans } = props;
  const mem = model.memory;
  useSignalRender(mem.changed);
  const tick = useLiveTick(model.dataChanged);
  const [note, setNote] = useState('');
  const status = mem.status;
  const act = <K extends ActionName>(
    action: K,
    args: IActionArgs[K],
    describe: (r: ActionResult<K>) => string
  ) => {
    setNote('');
    void ActionService.of(conn)
      .send(action, args)
      .then(outcome => setNote(outcomeNote(outcome, describe)));
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
  const recording = status.recording.state !== 'off';
  // what can run now: the same answer the palette's commands get
  const can = availability(model, trans);
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
      <RemedyButtons can={can} recording={recording} act={act} trans={trans} />
      {note && <div className="jp-TorchDbg-note">{note}</div>}
      {status.leak && <LeakCard leak={status.leak} trans={trans} />}
      {status.guard && (
        <GuardRow
          guard={status.guard}
          enabled={can.memoryGuard.enabled}
          why={can.memoryGuard.why}
          trans={trans}
          onChange={pauseAt =>
            act('set_memory_guard', { pause_at: pauseAt }, () => '')
          }
        />
      )}
      {mem.oom && <OomView oom={mem.oom} trans={trans} />}
      {status.activations && (
        <ActivationsView report={status.activations} trans={trans} />
      )}
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
