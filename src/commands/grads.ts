import { download, gradsCsv, gradsJson } from '../panels/grads';
import { currentConnection, ICommandContext } from './context';
import { CommandIDs } from './ids';

/** Export the gradient norms the panel holds (CSV or JSON download). */
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
}
