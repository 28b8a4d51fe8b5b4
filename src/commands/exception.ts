import { Notification } from '@jupyterlab/apputils';

import { IExceptionActions } from '../panels/exception';
import { can, currentConnection, ICommandContext } from './context';
import { CommandIDs } from './ids';

/** The last exception: go to its cell, `%debug` it, copy its report. */
export function addExceptionCommands(
  ctx: ICommandContext,
  actions: IExceptionActions
): void {
  const { app, trans } = ctx;
  const lastException = () =>
    currentConnection(ctx)?.model.exception.current ?? null;

  app.commands.addCommand(CommandIDs.goToFailingCell, {
    label: trans.__('Go to Failing Cell'),
    isEnabled: () => can(ctx, 'goToCell').enabled,
    execute: async () => {
      const exc = lastException();
      const m = currentConnection(ctx)?.model;
      if (exc && m) {
        const frame =
          exc.frames[m.exception.frame] ?? exc.frames[exc.focus ?? 0];
        const note = frame ? await actions.goToFrame(exc, frame) : '';
        if (note) {
          Notification.info(note, { autoClose: 4000 });
        }
      }
    }
  });
  app.commands.addCommand(CommandIDs.debugException, {
    label: trans.__('Debug Last Exception (%debug)'),
    isEnabled: () => can(ctx, 'debug').enabled,
    execute: async () => {
      const exc = lastException();
      const note = exc ? await actions.debug(exc) : '';
      if (note) {
        Notification.info(note, { autoClose: 8000 });
      }
    }
  });
  app.commands.addCommand(CommandIDs.copyReport, {
    label: trans.__('Copy Exception Report'),
    isEnabled: () => can(ctx, 'copyReport').enabled,
    execute: () => {
      const exc = lastException();
      return exc ? actions.copyReport(exc) : undefined;
    }
  });
}
