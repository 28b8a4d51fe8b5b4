import { InputDialog, Notification } from '@jupyterlab/apputils';

import { sendControl } from '../panels/control';
import { ActionName, IActionArgs } from '../protocol/messages';
import { currentConnection, ICommandContext, isConnected } from './context';
import { CommandIDs } from './ids';

/**
 * Training control: clip, pause / resume / single step (also in the panel's
 * "Training control" section).
 */
export function addControlCommands(ctx: ICommandContext): void {
  const { app, trans } = ctx;
  const current = () => currentConnection(ctx);
  const connected = () => isConnected(ctx);
  // Pause and Step act on a run that is training (the kernel refuses them while idle)
  const running = () => current()?.model.control.running ?? false;
  const control = async <K extends ActionName>(
    action: K,
    args: IActionArgs[K]
  ) => {
    const conn = current();
    if (!conn) {
      Notification.warning(trans.__('No kernel: open a notebook first.'));
      return;
    }
    const error = await sendControl(conn, action, args);
    if (error) {
      Notification.error(error, { autoClose: 6000 });
    }
  };

  app.commands.addCommand(CommandIDs.clip, {
    label: trans.__('Clip Gradients…'),
    caption: trans.__(
      'Clip the gradient norm at every optimizer step from the next one'
    ),
    isEnabled: connected,
    execute: async () => {
      const result = await InputDialog.getNumber({
        title: trans.__('Clip gradients at max_norm'),
        value: current()?.model.control.state?.clip ?? 1.0
      });
      if (result.button.accept && result.value !== null) {
        await control('clip', { max_norm: result.value });
      }
    }
  });
  app.commands.addCommand(CommandIDs.unclip, {
    label: trans.__('Stop Clipping'),
    isEnabled: () =>
      connected() && (current()?.model.control.state?.clip ?? null) !== null,
    execute: () => control('unclip', {})
  });
  app.commands.addCommand(CommandIDs.pause, {
    label: trans.__('Pause Training'),
    isEnabled: () => connected() && running(),
    execute: () => control('pause', {})
  });
  app.commands.addCommand(CommandIDs.resume, {
    label: trans.__('Resume Training'),
    isEnabled: connected,
    execute: () => control('resume', {})
  });
  app.commands.addCommand(CommandIDs.step, {
    label: trans.__('Single Step (while paused)'),
    isEnabled: () =>
      connected() &&
      running() &&
      (current()?.model.control.state?.paused ?? false),
    execute: () => control('step', {})
  });
}
