import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import {
  currentConnection,
  ICommandContext,
  isConnected,
  notifyFailure,
  notifyReply
} from './context';
import { CommandIDs } from './ids';

/**
 * The panel's own commands: show it, load the kernel side, resync the stream
 * and clear the logged series.
 */
export function addPanelCommands(
  ctx: ICommandContext,
  options: { sidebar: Widget; icon: LabIcon }
): void {
  const { app, trans } = ctx;
  const current = () => currentConnection(ctx);

  app.commands.addCommand(CommandIDs.open, {
    label: trans.__('Open Panel'),
    caption: trans.__('Show the Torch Debugger sidebar'),
    icon: options.icon,
    execute: () => {
      app.shell.activateById(options.sidebar.id);
    }
  });
  app.commands.addCommand(CommandIDs.load, {
    label: trans.__('Load in Kernel'),
    caption: trans.__(
      'Run %load_ext jupyterlab_torchdbg in the current kernel'
    ),
    isEnabled: () => current() !== null,
    execute: async () => {
      const conn = current();
      if (conn && (await conn.load())) {
        await conn.connect();
      }
    }
  });
  app.commands.addCommand(CommandIDs.resync, {
    label: trans.__('Resync Panel with Kernel'),
    isEnabled: () => isConnected(ctx),
    execute: () =>
      current()?.sendAction('snapshot', {}).then(notifyReply, notifyFailure)
  });
  app.commands.addCommand(CommandIDs.clearSeries, {
    label: trans.__('Clear Logged Series'),
    isEnabled: () => isConnected(ctx),
    execute: () =>
      current()
        ?.sendAction('clear_history', {})
        .then(reply => {
          notifyReply(reply);
          if (reply.method === 'ack') {
            current()?.model.clearSeries();
          }
        }, notifyFailure)
  });
}
