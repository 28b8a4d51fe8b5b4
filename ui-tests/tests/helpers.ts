import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';

export const PANEL = '#jp-torchdbg-sidebar';

/** Set a cell's source through the model (no auto-indent surprises). */
export async function setSource(
  page: IJupyterLabPageFixture,
  index: number,
  source: string
): Promise<void> {
  await page.evaluate(
    ({ index, source }) => {
      const app = (window as any).jupyterapp;
      const nb = app.shell.currentWidget.content;
      while (nb.model.cells.length <= index) {
        nb.model.sharedModel.insertCell(nb.model.cells.length, {
          cell_type: 'code',
          source: ''
        });
      }
      nb.model.cells.get(index).sharedModel.setSource(source);
    },
    { index, source }
  );
}

/** A new notebook with the panel open and connected to its kernel. */
export async function notebookWithPanel(
  page: IJupyterLabPageFixture,
  name: string
): Promise<void> {
  await page.notebook.createNew(name);
  await page.notebook.setCell(0, 'code', '1');
  await page.keyboard.press('Control+Shift+Y');
  await expect(page.locator(`${PANEL} .jp-TorchDbg-body`)).toHaveAttribute(
    'data-state',
    'connected',
    { timeout: 60000 }
  );
}
