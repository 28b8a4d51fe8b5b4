/**
 * Panel state that tells the truth (issue #22), in Chromium with a real
 * kernel: an exception from an earlier cell folds to one line once a later
 * cell ran without error; Dismiss survives switching to another notebook and
 * back (the new comm's snapshot re-sends the last exception); `%unload_ext`
 * then `%load_ext` typed by hand reattaches the panel.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  notebookWithPanel,
  PANEL,
  setSectionOpen,
  setSource,
  sidebarWidth
} from './helpers';

test.use({ autoGoto: true, kernels: null });

test('an earlier exception folds after a later cell; Dismiss survives switching notebooks', async ({
  page
}, testInfo) => {
  test.setTimeout(240000);
  await notebookWithPanel(page, 'stale-a.ipynb');
  await setSectionOpen(page, 'memory', true);
  await setSource(page, 0, 'import torch\nx = torch.randn(100, 3)');
  await page.notebook.runCell(0, true);
  await setSource(
    page,
    1,
    'y = torch.randint(0, 2, (90,))\ntorch.utils.data.TensorDataset(x, y)'
  );
  await page.notebook.runCell(1, true);
  const exc = page.locator(`${PANEL} .jp-TorchDbg-exception`);
  await expect(exc).toBeVisible({ timeout: 30000 });
  await expect(exc).not.toHaveAttribute('data-superseded', /./);
  const id = await exc.getAttribute('data-exception-id');

  // a later cell runs without error: one line, "Earlier error"
  await setSource(page, 2, 'z = 1');
  await page.notebook.runCell(2, true);
  await expect(exc).toHaveAttribute('data-superseded', 'cell_ok');
  await expect(exc.locator('.jp-TorchDbg-excEarlierLine')).toHaveText(
    'AssertionError: Size mismatch between tensors'
  );
  await expect(exc.locator('.jp-TorchDbg-excEarlierWhere')).toHaveText(
    'Earlier error, In [2] · a later cell ran without error'
  );
  await sidebarWidth(page, 250);
  const section = page.locator(`${PANEL} [data-section="exception"]`);
  await section.screenshot({
    path: testInfo.outputPath('exception-earlier-light.png')
  });
  await page.theme.setDarkTheme();
  await section.screenshot({
    path: testInfo.outputPath('exception-earlier-dark.png')
  });
  await page.theme.setLightTheme();
  // Show unfolds it
  await exc.getByRole('button', { name: 'Show' }).click();
  await expect(exc.locator('.jp-TorchDbg-excTitle')).toBeVisible();
  await expect(exc).not.toHaveAttribute('data-superseded', /./);

  // Dismiss, then another notebook (the panel follows it), then back
  await exc.getByRole('button', { name: 'Dismiss' }).click();
  await expect(exc).toHaveCount(0);
  await page.notebook.createNew('stale-b.ipynb');
  await expect(page.locator(`${PANEL} .jp-TorchDbg-kernelName`)).toHaveText(
    'stale-b.ipynb',
    { timeout: 30000 }
  );
  await page.notebook.activate('stale-a.ipynb');
  await expect(page.locator(`${PANEL} .jp-TorchDbg-kernelName`)).toHaveText(
    'stale-a.ipynb'
  );
  await expect(page.locator(`${PANEL} .jp-TorchDbg-body`)).toHaveAttribute(
    'data-state',
    'connected',
    { timeout: 60000 }
  );
  // the snapshot parts come in order: the exception before memory's status
  await expect(
    page.locator(`${PANEL} [data-section="memory"] .jp-TorchDbg-memory`)
  ).toBeVisible({ timeout: 30000 });
  await expect(page.locator(`${PANEL} .jp-TorchDbg-exception`)).toHaveCount(0);
  expect(
    await page.evaluate(() =>
      localStorage.getItem('jupyterlab_torchdbg:dismissed-exceptions')
    )
  ).toContain(id!);
});

test('R04: %unload_ext then %load_ext typed by hand reattaches the panel', async ({
  page
}) => {
  test.setTimeout(180000);
  await notebookWithPanel(page, 'reload.ipynb');
  const body = page.locator(`${PANEL} .jp-TorchDbg-body`);
  await setSource(page, 0, '%unload_ext jupyterlab_torchdbg');
  await page.notebook.runCell(0, true);
  await expect(body).toHaveAttribute('data-state', 'not_loaded');
  await expect(body).toContainText('%unload_ext');
  await setSource(page, 1, '%load_ext jupyterlab_torchdbg');
  await page.notebook.runCell(1, true);
  await expect(body).toHaveAttribute('data-state', 'connected', {
    timeout: 30000
  });
  // and it streams again
  await setSource(
    page,
    2,
    'from jupyterlab_torchdbg import log\nfor i in range(5): log(i, reloaded=i)'
  );
  await page.notebook.runCell(2, true);
  await expect(page.locator(`${PANEL} [data-section="series"]`)).toContainText(
    'reloaded',
    { timeout: 30000 }
  );
});
