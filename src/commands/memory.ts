import { Notification } from '@jupyterlab/apputils';

import { formatBytes } from '../panels/memory';
import { GUARD_DEFAULT } from '../panels/memory/leakCard';
import { ActionName, ActionResult, IActionArgs } from '../protocol/messages';
import {
  can,
  captionOf,
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
  const { app, trans } = ctx;
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

  app.commands.addCommand(CommandIDs.emptyCache, {
    label: trans.__('Empty CUDA Cache'),
    caption: () =>
      captionOf(
        ctx,
        'emptyCache',
        trans.__('torch.cuda.empty_cache(): reserved before → after')
      ),
    isEnabled: () => can(ctx, 'emptyCache').enabled,
    execute: () =>
      memoryAction('empty_cache', {}, r =>
        trans.__(
          'CUDA cache emptied (%1 freed).',
          formatBytes(Number(r.freed_bytes ?? 0))
        )
      )
  });
  app.commands.addCommand(CommandIDs.releaseRefs, {
    label: trans.__('Release References (ends %debug on the last error)'),
    caption: () =>
      captionOf(
        ctx,
        'releaseRefs',
        trans.__(
          'Drop what keeps the last error alive, gc, empty the cache (ends %debug)'
        )
      ),
    isEnabled: () => can(ctx, 'releaseRefs').enabled,
    execute: () =>
      memoryAction('release_refs', {}, r =>
        typeof r.note === 'string' ? r.note : trans.__('References released.')
      )
  });
  app.commands.addCommand(CommandIDs.recordMemory, {
    label: () =>
      current()?.model.memory.status?.recording.state === 'off' ||
      !current()?.model.memory.status
        ? trans.__('Start Recording Memory History')
        : trans.__('Stop Recording Memory History'),
    caption: () =>
      captionOf(
        ctx,
        'recordMemory',
        trans.__('The CUDA allocator history; stop writes a snapshot file')
      ),
    isEnabled: () => can(ctx, 'recordMemory').enabled,
    execute: () => {
      const on =
        (current()?.model.memory.status?.recording.state ?? 'off') !== 'off';
      return memoryAction(
        'record_memory',
        on ? { op: 'stop' } : { op: 'start' },
        r =>
          typeof r.file === 'string'
            ? trans.__('Memory snapshot written to %1.', r.file)
            : trans.__('Recording memory history.')
      );
    }
  });
  app.commands.addCommand(CommandIDs.saveCheckpoint, {
    label: trans.__('Save Checkpoint of Model and Optimizer'),
    caption: () =>
      captionOf(
        ctx,
        'saveCheckpoint',
        trans.__('torch.save of their state dicts in the kernel’s folder')
      ),
    isEnabled: () => can(ctx, 'saveCheckpoint').enabled,
    execute: () =>
      memoryAction('save_checkpoint', {}, r =>
        trans.__('Checkpoint saved: %1', String(r.file ?? r.filename ?? ''))
      )
  });
  app.commands.addCommand(CommandIDs.measureActivations, {
    label: trans.__('Measure Where Activation Memory Goes'),
    caption: () =>
      captionOf(
        ctx,
        'measureActivations',
        trans.__(
          'Bytes each module saves for backward in one forward/backward, and the largest batch that fits'
        )
      ),
    isEnabled: () => can(ctx, 'measureActivations').enabled,
    execute: () =>
      memoryAction('measure_activations', {}, r =>
        r.state === 'done'
          ? trans.__('Activations measured: see Memory.')
          : trans.__('Armed: the next forward/backward is measured.')
      )
  });
  app.commands.addCommand(CommandIDs.memoryGuard, {
    label: () =>
      current()?.model.memory.status?.guard?.pause_at
        ? trans.__('Stop Pausing Before the Memory Limit')
        : trans.__('Pause Training Before the Memory Limit'),
    caption: () =>
      captionOf(
        ctx,
        'memoryGuard',
        trans.__('Pause at the next step once memory reaches 90% of the limit')
      ),
    isEnabled: () => can(ctx, 'memoryGuard').enabled,
    execute: () => {
      const on = !!current()?.model.memory.status?.guard?.pause_at;
      return memoryAction(
        'set_memory_guard',
        { pause_at: on ? null : GUARD_DEFAULT },
        () =>
          on
            ? trans.__('The memory guard is off.')
            : trans.__(
                'Training pauses at %1% of the memory limit.',
                String(GUARD_DEFAULT * 100)
              )
      );
    }
  });
  app.commands.addCommand(CommandIDs.exportTensorboard, {
    label: trans.__('Export the Shown Run as TensorBoard Files'),
    caption: () =>
      captionOf(
        ctx,
        'exportTensorboard',
        trans.__('Event files of its series and alarms, beside the notebook')
      ),
    isEnabled: () => can(ctx, 'exportTensorboard').enabled,
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
        trans.__('TensorBoard files written to %1', String(r.path ?? ''))
      );
    }
  });
}
