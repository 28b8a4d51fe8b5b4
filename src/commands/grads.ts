import { Notification } from '@jupyterlab/apputils';

import { download, gradsCsv, gradsJson, skipping } from '../panels/grads';
import { currentConnection, ICommandContext, notifyFailure } from './context';
import { CommandIDs } from './ids';

/**
 * Export the gradient norms the panel holds (CSV or JSON download); replay the
 * kept non-finite step under anomaly detection (its result is also an alert);
 * skip optimizer steps whose gradients are NaN/Inf (a toggle).
 */
export function addGradsCommands(ctx: ICommandContext): void {
  const { app, trans } = ctx;
  const model = () => currentConnection(ctx)?.model;

  app.commands.addCommand(CommandIDs.exportCsv, {
    label: trans.__('Export Gradient Norms as CSV'),
    isEnabled: () => !!model()?.grads.status,
    execute: () => {
      const m = model();
      if (m) {
        download('grad-norms.csv', gradsCsv(m), 'text/csv');
      }
    }
  });
  app.commands.addCommand(CommandIDs.exportJson, {
    label: trans.__('Export Gradient Norms as JSON'),
    isEnabled: () => !!model()?.grads.status,
    execute: () => {
      const m = model();
      if (m) {
        download('grad-norms.json', gradsJson(m), 'application/json');
      }
    }
  });
  app.commands.addCommand(CommandIDs.skipNonfinite, {
    label: trans.__('Skip Non-finite Optimizer Steps'),
    caption: trans.__(
      'Skip optimizer steps whose gradients are NaN/Inf, so the weights stay finite (every step is checked)'
    ),
    isEnabled: () => !!model()?.grads.status,
    isToggled: () => skipping(model()?.grads.status?.tracks),
    execute: async () => {
      const conn = currentConnection(ctx);
      if (!conn) {
        return;
      }
      const on = !skipping(conn.model.grads.status?.tracks);
      try {
        const reply = await conn.sendAction('skip_nonfinite', { on });
        if (reply.method === 'error') {
          Notification.error(reply.message, { autoClose: 8000 });
        }
      } catch (e) {
        notifyFailure(e as Error);
      }
    }
  });
  app.commands.addCommand(CommandIDs.replayStep, {
    label: trans.__('Replay the Bad Step with Anomaly Detection'),
    caption: trans.__(
      'Run the kept non-finite step once more under torch.autograd.detect_anomaly, on its pre-step weights'
    ),
    isEnabled: () => !!model()?.grads.status?.replayable,
    execute: async () => {
      const conn = currentConnection(ctx);
      const kept = conn?.model.grads.status?.replayable;
      if (!conn || !kept) {
        return;
      }
      try {
        const reply = await conn.sendAction('replay_step', {
          track: kept.track
        });
        if (reply.method === 'error') {
          Notification.error(reply.message, { autoClose: 8000 });
        } else {
          const message = reply.result.message;
          Notification.info(
            typeof message === 'string' ? message : trans.__('Replayed.'),
            { autoClose: 15000 }
          );
        }
      } catch (e) {
        notifyFailure(e as Error);
      }
    }
  });
}
