/**
 * Issue #24 in Chromium: a kernel killed (SIGKILL) while it trains. The next
 * kernel of the notebook (JupyterLab restarts it) hands its record to the
 * panel: why and where it died, its run's charts and alarms, kept after a page
 * reload, until dismissed. Then a leaking loop (`total_loss += loss`) gets its
 * holder named in Memory. Screenshots in light and dark at the default width.
 */
import { expect, test } from '@jupyterlab/galata';

import { notebookWithPanel, openPanel, PANEL, setSource } from './helpers';

test.use({ autoGoto: true, kernels: null });

/** A plain browser reload (Galata's page.reload waits for a launcher tab). */
async function reloadPage(
  page: import('@jupyterlab/galata').IJupyterLabPageFixture
): Promise<void> {
  await page.evaluate(() => window.location.reload());
  await page.waitForSelector('.jp-Notebook', { timeout: 60000 });
  await openPanel(page);
}

/** Accept JupyterLab's "the kernel appears to have died" dialog if it shows. */
async function acceptRestartDialog(
  page: import('@jupyterlab/galata').IJupyterLabPageFixture
): Promise<void> {
  const dialog = page.locator('.jp-Dialog');
  try {
    await dialog.waitFor({ state: 'visible', timeout: 30000 });
  } catch {
    return;
  }
  await dialog.locator('.jp-mod-accept').click();
}

test('a kernel killed while training: its run reaches the next kernel, after a reload too', async ({
  page
}, testInfo) => {
  // a retry's notebook is another one: the record of a failed try's kernel (its
  // notebook, same folder) is not this try's
  await notebookWithPanel(page, `died-${testInfo.retry}.ipynb`);
  await setSource(
    page,
    0,
    [
      'import os, signal, time, torch',
      'from torch import nn',
      'import jupyterlab_torchdbg as dbg',
      'torch.manual_seed(0)',
      'model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))',
      'opt = torch.optim.SGD(model.parameters(), lr=0.01)',
      'x, y = torch.randn(128, 32), torch.randn(128, 1)',
      'for step in range(1, 1000):',
      '    opt.zero_grad()',
      '    loss = nn.functional.mse_loss(model(x), y)',
      '    loss.backward()',
      '    opt.step()',
      '    dbg.log(loss=loss)',
      '    time.sleep(0.005)',
      '    if step == 300:',
      '        time.sleep(2)  # the record is written at the flush cadence',
      '        os.kill(os.getpid(), signal.SIGKILL)'
    ].join('\n')
  );
  // the cell never finishes: start it without waiting for its end
  await page.notebook.selectCells(0);
  void page.evaluate(() =>
    (window as any).jupyterapp.commands.execute('notebook:run-cell')
  );
  await acceptRestartDialog(page);
  const banner = page.locator(`${PANEL} .jp-TorchDbg-recordBanner`);
  await expect(banner).toBeVisible({ timeout: 90000 });
  await expect(banner).toHaveAttribute('data-end', 'signal');
  // the step the training thread reached, read live by the record's writer (not the
  // last one a stream flush carried: the steps just before the sleep were never sent)
  await expect(banner.locator('.jp-TorchDbg-headline')).toHaveText(
    /^The kernel died at step 300 of run 1 \(killed by signal 9; memory [\d.]+ MiB( of [\d.]+ GiB)?\)\.$/
  );
  // its run: the loss chart as it was recorded
  await banner.locator('.jp-TorchDbg-recordRuns button').first().click();
  const run = page.locator(`${PANEL} .jp-TorchDbg-recordRun`);
  await expect(
    run.locator('.jp-TorchDbg-recordChart[data-series="loss"] canvas')
  ).toBeVisible({ timeout: 30000 });
  await expect(run).toContainText(/Recorded run 1: (2[89]\d|300) steps/);
  await page
    .locator(`${PANEL} .jp-TorchDbg-record`)
    .screenshot({ path: testInfo.outputPath('record-light.png') });
  await page.theme.setDarkTheme();
  await page
    .locator(`${PANEL} .jp-TorchDbg-record`)
    .screenshot({ path: testInfo.outputPath('record-dark.png') });
  await page.theme.setLightTheme();

  // a page reload: the same record, from the store, through the running kernel
  await reloadPage(page);
  await expect(banner).toBeVisible({ timeout: 60000 });
  await expect(banner.locator('.jp-TorchDbg-headline')).toContainText(
    'of run 1 (killed by signal 9'
  );
  // dismissed: gone, and still gone after a reload; the run can still be reopened
  await banner.locator('.jp-TorchDbg-recordDismiss').click();
  await expect(banner).toHaveCount(0);
  await reloadPage(page);
  await expect(page.locator(`${PANEL} .jp-TorchDbg-body`)).toHaveAttribute(
    'data-state',
    'connected',
    { timeout: 60000 }
  );
  await expect(page.locator(`${PANEL} .jp-TorchDbg-recordEarlier`)).toBeVisible(
    { timeout: 30000 }
  );
  await expect(banner).toHaveCount(0);
});

test('a loop that keeps every step graph: the holder is named in Memory', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'leak.ipynb');
  await setSource(
    page,
    0,
    [
      'import torch',
      'from torch import nn',
      'torch.manual_seed(0)',
      'net = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1))',
      'opt = torch.optim.SGD(net.parameters(), lr=1e-3)',
      'total_loss = 0',
      'for step in range(400):',
      '    x = torch.randn(256, 512)',
      '    loss = net(x).pow(2).mean()',
      '    opt.zero_grad()',
      '    loss.backward(retain_graph=True)',
      '    opt.step()',
      '    total_loss += loss'
    ].join('\n')
  );
  await page.notebook.runCell(0, true);
  const leak = page.locator(
    `${PANEL} [data-section="memory"] .jp-TorchDbg-leak`
  );
  await expect(leak).toBeVisible({ timeout: 60000 });
  await expect(leak.locator('.jp-TorchDbg-leakHolders')).toContainText(
    'total_loss',
    { timeout: 60000 }
  );
  await expect(leak).toContainText('per step');
  await page
    .locator(`${PANEL} [data-section="memory"]`)
    .screenshot({ path: testInfo.outputPath('leak-light.png') });
  await page.theme.setDarkTheme();
  await page
    .locator(`${PANEL} [data-section="memory"]`)
    .screenshot({ path: testInfo.outputPath('leak-dark.png') });
  await page.theme.setLightTheme();
});
