/**
 * R46 in Chromium: reloading the page does not leave comms behind in the
 * kernel. The tab keeps one client id across reloads, closes its comm on
 * `pagehide`, and the kernel closes any older comm of the same tab; a second
 * tab still gets its own comm (R05).
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';

import { notebookWithPanel, openPanel, PANEL, setSource } from './helpers';

// Galata's kernel mock stands in the way of a real kernel's comms: use the real API.
test.use({ autoGoto: true, kernels: null });

const CLIENT_ID_KEY = 'jupyterlab_torchdbg:client-id';

const COUNT_CELL =
  "print('live comms', __import__('jupyterlab_torchdbg.kernel.extension', " +
  "fromlist=['x']).current().hub.count)";

async function reloadAndReattach(page: IJupyterLabPageFixture): Promise<void> {
  // a browser reload (pagehide, then a new page in the same tab); not waiting
  // for a launcher tab, and with Galata's in-page helpers hooked up again
  await page.reload({ waitForIsReady: false });
  await page.waitForSelector('.jp-Notebook', { timeout: 60000 });
  await openPanel(page);
  await expect(page.locator(`${PANEL} .jp-TorchDbg-body`)).toHaveAttribute(
    'data-state',
    'connected',
    { timeout: 60000 }
  );
}

/** Run the count cell and expect the kernel to hold `n` live comms. */
async function expectLiveComms(
  page: IJupyterLabPageFixture,
  n: number
): Promise<void> {
  await setSource(page, 0, COUNT_CELL);
  await page.notebook.runCell(0, true);
  await expect(
    page
      .locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')
      .first()
      .locator('.jp-OutputArea-output')
  ).toHaveText(`live comms ${n}`, { timeout: 30000 });
}

test('R46: page reloads leave exactly one live comm for the tab', async ({
  page
}) => {
  await notebookWithPanel(page, 'r46.ipynb');
  await expectLiveComms(page, 1);
  const tabId = await page.evaluate(
    key => window.sessionStorage.getItem(key),
    CLIENT_ID_KEY
  );
  expect(tabId).toMatch(/^[A-Za-z0-9_-]{1,64}$/);

  for (let i = 0; i < 4; i++) {
    await reloadAndReattach(page);
  }
  // the reloaded tab kept its id, and the kernel kept one comm for it
  expect(
    await page.evaluate(
      key => window.sessionStorage.getItem(key),
      CLIENT_ID_KEY
    )
  ).toBe(tabId);
  await expectLiveComms(page, 1);

  // R05: another tab on the same kernel has its own id and its own comm
  const path = await page.evaluate(
    () => (window as any).jupyterapp.shell.currentWidget.context.path as string
  );
  const other = await page.context().newPage();
  // its own workspace, opening the same notebook (same session, same kernel)
  await other.goto(`lab/workspaces/r46-other-tab/tree/${path}`);
  await other.waitForSelector('.jp-Notebook', { timeout: 60000 });
  await openPanel(other);
  await expect(other.locator(`${PANEL} .jp-TorchDbg-body`)).toHaveAttribute(
    'data-state',
    'connected',
    { timeout: 60000 }
  );
  expect(
    await other.evaluate(
      key => window.sessionStorage.getItem(key),
      CLIENT_ID_KEY
    )
  ).not.toBe(tabId);
  await expectLiveComms(page, 2);
  await other.close();
});
