import { Notification } from '@jupyterlab/apputils';

import { download, gradsCsv, gradsJson, skipping } from '../panels/grads';
import { tidyCsv } from '../panels/series/export';
import {
  addGuarded,
  currentConnection,
  ICommandContext,
  runAction
} from './context';
import { CommandIDs } from './ids';
import { saveBesideDocument } from './save';

/**
 * Export what the panel holds: every run and every series as one tidy CSV
 * table saved beside the notebook, or the gradient norms as CSV or JSON
 * (downloads, as the Gradients section's buttons); replay the kept non-finite
 * step under anomaly detection (its result is also an alert); skip optimizer
 * steps whose gradients are NaN/Inf (a toggle).
 */
export function addGradsCommands(ctx: ICommandContext): void {
  const { app, trans } = ctx;
  const model = () => currentConnection(ctx)?.model;

  addGuarded(ctx, CommandIDs.exportAll, 'exportAll', {
    label: trans.__('Export All Runs and Series as CSV'),
    caption: () =>
      trans.__(
        'One tidy table kernel,run,series,step,time,value,text of every run, series (logged, gradient and weight norms, memory) and alarm, saved beside the notebook'
      ),
    execute: async () => {
      const m = model();
      if (!m) {
        return;
      }
      const doc = ctx.tracker.currentWidget?.sessionContext.path ?? '';
      const label = ctx.tracker.currentLabel.replace(/\.ipynb$/, '');
      await saveBesideDocument(
        app,
        doc,
        `${label || 'torchdbg'}-torchdbg`,
        'csv',
        tidyCsv(m),
        'text/csv',
        trans
      );
    }
  });
  addGuarded(ctx, CommandIDs.exportCsv, 'exportGrads', {
    label: trans.__('Export Gradient Norms as CSV'),
    caption: () => trans.__('Download run,step,layer,norm of every run held'),
    execute: () => {
      const m = model();
      if (m) {
        download('grad-norms.csv', gradsCsv(m), 'text/csv');
      }
    }
  });
  addGuarded(ctx, CommandIDs.exportJson, 'exportGrads', {
    label: trans.__('Export Gradient Norms as JSON'),
    caption: () =>
      trans.__('Download the norms, layers, thresholds and alarms'),
    execute: () => {
      const m = model();
      if (m) {
        download('grad-norms.json', gradsJson(m), 'application/json');
      }
    }
  });
  addGuarded(ctx, CommandIDs.skipNonfinite, 'skipNonfinite', {
    label: trans.__('Skip Non-finite Optimizer Steps'),
    caption: () =>
      trans.__(
        'Skip optimizer steps whose gradients are NaN/Inf, so the weights stay finite (every step is checked)'
      ),
    isToggled: () => skipping(model()?.grads.status?.tracks),
    execute: async () => {
      const conn = currentConnection(ctx);
      if (!conn) {
        return;
      }
      const on = !skipping(conn.model.grads.status?.tracks);
      await runAction(conn, 'skip_nonfinite', { on }, 8000);
    }
  });
  addGuarded(ctx, CommandIDs.replayStep, 'replay', {
    label: trans.__('Replay the Bad Step with Anomaly Detection'),
    caption: () =>
      trans.__(
        'Run the kept non-finite step once more under torch.autograd.detect_anomaly, on its pre-step weights'
      ),
    execute: async () => {
      const conn = currentConnection(ctx);
      const kept = conn?.model.grads.status?.replayable;
      if (!conn || !kept) {
        return;
      }
      const replay = await runAction(
        conn,
        'replay_step',
        { track: kept.track },
        8000
      );
      if (replay) {
        Notification.info(replay.message || trans.__('Replayed.'), {
          autoClose: 15000
        });
      }
    }
  });
}
