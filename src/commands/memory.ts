import { Notification } from '@jupyterlab/apputils';

import { formatBytes } from '../panels/memory';
import { ActionName, IActionArgs } from '../protocol/messages';
import { can, captionOf, currentConnection, ICommandContext } from './context';
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
    success: (result: { [key: string]: unknown }) => string
  ) => {
    const conn = current();
    if (!conn) {
      return;
    }
    try {
      const reply = await conn.sendAction(action, args);
      if (reply.method === 'error') {
        Notification.error(reply.message, { autoClose: 6000 });
      } else {
        Notification.success(success(reply.result), { autoClose: 6000 });
      }
    } catch (e) {
      Notification.warning((e as Error).message, { autoClose: 5000 });
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
}
