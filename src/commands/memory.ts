import { Notification } from '@jupyterlab/apputils';

import { formatBytes } from '../panels/memory';
import { GUARD_DEFAULT } from '../panels/memory/leakCard';
import { ActionName, ActionResult, IActionArgs } from '../protocol/messages';
import {
  addGuarded,
  currentConnection,
  ICommandContext,
  runAction
} from './context';
import { CommandIDs } from './ids';

/**
 * Memory remedies and the allocator's history recording; the ack says what
 * changed, shown as a notification.
 */
export function addMemoryCommands(ctx: ICommandContext): void {
  const { trans } = ctx;
  const current = () => currentConnection(ctx);
  const memoryAction = async <K extends ActionName>(
    action: K,
    args: IActionArgs[K],
    success: (result: ActionResult<K>) => string
  ) => {
    const conn = current();
    if (!conn) {
      return;
    }
    const result = await runAction(conn, action, args, 6000);
    if (result) {
      Notification.success(success(result), { autoClose: 6000 });
    }
  };

  addGuarded(ctx, CommandIDs.emptyCache, 'emptyCache', {
    label: trans.__('Empty CUDA Cache'),
    caption: () =>
      trans.__('torch.cuda.empty_cache(): reserved before → after'),
    execute: () =>
      memoryAction('empty_cache', {}, r =>
        trans.__('CUDA cache emptied (%1 freed).', formatBytes(r.freed_bytes))
      )
  });
  addGuarded(ctx, CommandIDs.releaseRefs, 'releaseRefs', {
    label: trans.__('Release References (ends %debug on the last error)'),
    caption: () =>
      trans.__(
        'Drop what keeps the last error alive, gc, empty the cache (ends %debug)'
      ),
    execute: () => memoryAction('release_refs', {}, r => r.note)
  });
  addGuarded(ctx, CommandIDs.recordMemory, 'recordMemory', {
    label: () =>
      current()?.model.memory.status?.recording.state === 'off' ||
      !current()?.model.memory.status
        ? trans.__('Start Recording Memory History')
        : trans.__('Stop Recording Memory History'),
    caption: () =>
      trans.__('The CUDA allocator history; stop writes a snapshot file'),
    execute: () => {
      const on =
        (current()?.model.memory.status?.recording.state ?? 'off') !== 'off';
      return memoryAction(
        'record_memory',
        on ? { op: 'stop' } : { op: 'start' },
        r =>
          'file' in r
            ? trans.__('Memory snapshot written to %1.', r.file)
            : (r.note ?? trans.__('Recording memory history.'))
      );
    }
  });
  addGuarded(ctx, CommandIDs.saveCheckpoint, 'saveCheckpoint', {
    label: trans.__('Save Checkpoint of Model and Optimizer'),
    caption: () =>
      trans.__('torch.save of their state dicts in the kernel’s folder'),
    execute: () =>
      memoryAction('save_checkpoint', {}, r =>
        trans.__('Checkpoint saved: %1', r.file)
      )
  });
  addGuarded(ctx, CommandIDs.measureActivations, 'measureActivations', {
    label: trans.__('Measure Where Activation Memory Goes'),
    caption: () =>
      trans.__(
        'Bytes each module saves for backward in one forward/backward, and the largest batch that fits'
      ),
    execute: () =>
      memoryAction('measure_activations', {}, r =>
        r.state === 'done'
          ? trans.__('Activations measured: see Memory.')
          : r.state === 'armed'
            ? trans.__('Armed: the next forward/backward is measured.')
            : trans.__('Nothing measured: see Memory for why.')
      )
  });
  addGuarded(ctx, CommandIDs.memoryGuard, 'memoryGuard', {
    label: () =>
      current()?.model.memory.status?.guard?.pause_at
        ? trans.__('Stop Pausing Before the Memory Limit')
        : trans.__('Pause Training Before the Memory Limit'),
    caption: () =>
      trans.__('Pause at the next step once memory reaches 90% of the limit'),
    execute: () => {
      const on = !!current()?.model.memory.status?.guard?.pause_at;
      return memoryAction(
        'set_memory_guard',
        { pause_at: on ? null : GUARD_DEFAULT },
        r =>
          r.guard.pause_at === null
            ? trans.__('The memory guard is off.')
            : trans.__(
                'Training pauses at %1% of the memory limit.',
                String(Math.round(r.guard.pause_at * 100))
              )
      );
    }
  });
  addGuarded(ctx, CommandIDs.exportTensorboard, 'exportTensorboard', {
    label: trans.__('Export the Shown Run as TensorBoard Files'),
    caption: () =>
      trans.__('Event files of its series and alarms, beside the notebook'),
    execute: () => {
      const model = current()?.model;
      const run = model?.runs.shown ?? 0;
      if (!model || run < 1) {
        Notification.warning(trans.__('No run to export.'), {
          autoClose: 5000
        });
        return;
      }
      return memoryAction('export_tensorboard', { run, kernel: null }, r =>
        trans.__('TensorBoard files written to %1', r.path)
      );
    }
  });
}
