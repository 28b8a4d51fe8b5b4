import { JupyterFrontEnd } from '@jupyterlab/application';
import { Clipboard } from '@jupyterlab/apputils';
import { ConsolePanel } from '@jupyterlab/console';
import { PathExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { TranslationBundle } from '@jupyterlab/translation';

import { KernelTracker } from '../connection/tracker';
import {
  debugNote,
  exceptionReport,
  IExceptionActions
} from '../panels/exception';
import { IException, IExceptionFrame } from '../protocol/messages';

/** The notebook panel running the current connection's kernel, if any. */
function notebookOfCurrentKernel(
  notebooks: INotebookTracker | null,
  tracker: KernelTracker
): NotebookPanel | null {
  const kernelId = tracker.current?.kernel.id;
  if (!notebooks || !kernelId) {
    return null;
  }
  const current = notebooks.currentWidget;
  if (current?.sessionContext.session?.kernel?.id === kernelId) {
    return current;
  }
  return (
    notebooks.find(p => p.sessionContext.session?.kernel?.id === kernelId) ??
    null
  );
}

/**
 * "Go to cell", "Debug" and "Copy report" for the exception view. Cells are
 * found by the id JupyterLab sent with the execute request (R40: identical code
 * in two cells is not ambiguous; a deleted cell is said to be deleted; file paths
 * are opened only inside the server root).
 */
export function exceptionActions(
  app: JupyterFrontEnd,
  notebooks: INotebookTracker | null,
  tracker: KernelTracker,
  trans: TranslationBundle
): IExceptionActions {
  return {
    async goToFrame(exc: IException, frame: IExceptionFrame): Promise<string> {
      const panel = notebookOfCurrentKernel(notebooks, tracker);
      if (frame.origin === 'library') {
        return trans.__('Library frame: its source is shown below.');
      }
      if (frame.origin === 'file') {
        if (!frame.path || !panel) {
          return trans.__('This file is outside the notebook folder.');
        }
        const dir = PathExt.dirname(panel.context.path);
        const target = PathExt.normalize(PathExt.join(dir, frame.path));
        if (
          target.startsWith('..') ||
          PathExt.normalize(frame.path).startsWith('..')
        ) {
          return trans.__('This file is outside the server root; not opened.');
        }
        await app.commands.execute('docmanager:open', { path: target });
        return trans.__('Opened %1 (line %2).', target, String(frame.lineno));
      }
      const cellId = frame.cell_id ?? exc.cell_id;
      if (!panel || !cellId) {
        return trans.__('The notebook of this kernel is not open.');
      }
      const nb = panel.content;
      const index = nb.widgets.findIndex(c => c.model.id === cellId);
      if (index < 0) {
        return trans.__('The failing cell was deleted.');
      }
      app.shell.activateById(panel.id);
      const cell = nb.widgets[index];
      nb.activeCellIndex = index;
      await nb.scrollToCell(cell, 'center');
      nb.mode = 'edit';
      const source = cell.model.sharedModel.getSource().split('\n');
      const line = Math.max(0, Math.min(source.length - 1, frame.lineno - 1));
      cell.editor?.setCursorPosition({ line, column: 0 });
      cell.editor?.focus();
      cell.node.classList.add('jp-TorchDbg-flash');
      setTimeout(() => cell.node.classList.remove('jp-TorchDbg-flash'), 2500);
      const edited =
        frame.source_changed ||
        (source[line] ?? '').trim() !== frame.line.trim();
      return edited
        ? trans.__(
            'Source changed since it ran: line %1 may have moved.',
            String(frame.lineno)
          )
        : '';
    },

    async debug(exc: IException): Promise<string> {
      const panel = notebookOfCurrentKernel(notebooks, tracker);
      let console: ConsolePanel | undefined;
      if (panel) {
        app.shell.activateById(panel.id);
        // A console linked to the notebook's session: the same kernel, a prompt with stdin (R39).
        console = (await app.commands.execute('notebook:create-console', {
          activate: true
        })) as ConsolePanel;
      } else {
        const kernelId = tracker.current?.kernel.id;
        console = (await app.commands.execute('console:create', {
          activate: true,
          kernelPreference: { id: kernelId, shouldStart: false }
        })) as ConsolePanel;
      }
      if (!console) {
        throw new Error(trans.__('Could not open a console.'));
      }
      await console.sessionContext.ready;
      void console.console.inject('%debug');
      return debugNote(exc, trans);
    },

    async copyReport(exc: IException): Promise<void> {
      Clipboard.copyToSystem(exceptionReport(exc));
    }
  };
}
