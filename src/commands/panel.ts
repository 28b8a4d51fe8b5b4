import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { can, currentConnection, ICommandContext, runAction } from './context';
import { CommandIDs } from './ids';

/**
 * The panel's own commands: show it (or toggle it: Ctrl+Shift+Y), load the
 * kernel side, resync the stream and clear the logged series.
 */
export function addPanelCommands(
  ctx: ICommandContext,
  options: {
    sidebar: Widget;
    icon: LabIcon;
    /** Collapses the right sidebar area (the lab shell's), for the toggle. */
    collapseRight?: () => void;
  }
): void {
  const { app, trans } = ctx;
  const current = () => currentConnection(ctx);
  const { sidebar } = options;

  app.commands.addCommand(CommandIDs.open, {
    label: trans.__('Open Panel'),
    caption: trans.__('Show the Torch Debugger sidebar'),
    icon: options.icon,
    execute: () => {
      app.shell.activateById(sidebar.id);
    }
  });
  // Ctrl+Shift+Y: shown -> hidden (the right area collapses), else shown.
  app.commands.addCommand(CommandIDs.toggle, {
    label: trans.__('Toggle Panel'),
    caption: trans.__('Show the Torch Debugger sidebar, or hide it when shown'),
    isToggled: () => sidebar.isVisible,
    execute: () => {
      if (sidebar.isVisible && options.collapseRight) {
        options.collapseRight();
      } else {
        app.shell.activateById(sidebar.id);
      }
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
    isEnabled: () => can(ctx, 'resync').enabled,
    execute: async () => {
      const conn = current();
      if (conn) {
        await runAction(conn, 'snapshot', {});
      }
    }
  });
  app.commands.addCommand(CommandIDs.clearSeries, {
    label: trans.__('Clear Logged Series'),
    isEnabled: () => can(ctx, 'clearSeries').enabled,
    execute: async () => {
      const conn = current();
      if (conn && (await runAction(conn, 'clear_history', {}))) {
        current()?.model.clearSeries();
      }
    }
  });
}
