/**
 * Charts at the default sidebar width: a logged series with log-y and smoothing
 * toggled on (pressed state remembered per series), the gradient heatmap with
 * its colour scale and a readable height, the memory timeline's byte axis.
 * Screenshots in the light and dark themes.
 */
import { expect, test } from '@jupyterlab/galata';

import { notebookWithPanel, PANEL, setSource } from './helpers';

test.use({ autoGoto: true, kernels: null });

const TRAIN = [
  'import math, random, torch',
  'from torch import nn',
  'from jupyterlab_torchdbg import log',
  'torch.manual_seed(0); random.seed(0)',
  'model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))',
  'opt = torch.optim.SGD(model.parameters(), lr=0.05)',
  'x, y = torch.randn(64, 8), torch.randn(64, 1)',
  'for step in range(300):',
  '    opt.zero_grad()',
  '    loss = nn.functional.mse_loss(model(x), y)',
  '    loss.backward()',
  '    opt.step()',
  '    log(step, loss=loss.item() * (1 + 0.5 * random.random()))'
].join('\n');

test('series toggles, heatmap scale and memory axis at 250 px', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'charts.ipynb');
  await setSource(page, 0, TRAIN);
  await page.evaluate(() => {
    const app = (window as any).jupyterapp;
    app.shell.currentWidget.content.activeCellIndex = 0;
    void app.commands.execute('notebook:run-cell');
  });
  const card = page.locator(
    `${PANEL} .jp-TorchDbg-seriesCard[data-series="loss"]`
  );
  await expect(card).toBeVisible({ timeout: 60000 });
  await expect(card.locator('.jp-TorchDbg-seriesFooter')).toContainText(
    '300 points',
    { timeout: 60000 }
  );

  // log-y and smoothing: toggle buttons with aria-pressed, remembered per name
  const logBtn = card.getByRole('button', { name: 'log', exact: true });
  const smoothBtn = card.getByRole('button', { name: 'smooth', exact: true });
  await expect(logBtn).toHaveAttribute('aria-pressed', 'false');
  await logBtn.click();
  await smoothBtn.click();
  await expect(logBtn).toHaveAttribute('aria-pressed', 'true');
  await expect(smoothBtn).toHaveAttribute('aria-pressed', 'true');
  const stored = await page.evaluate(() =>
    window.localStorage.getItem('jupyterlab-torchdbg:series-view:loss')
  );
  expect(JSON.parse(stored ?? '{}')).toEqual({ log: true, smooth: true });
  await expect(card.locator('canvas').first()).toBeVisible();

  // the heatmap: at least 60 px tall, with its colour scale's two ends labelled
  const track = page.locator(`${PANEL} .jp-TorchDbg-track`).first();
  await track.scrollIntoViewIfNeeded();
  const heat = track.locator('canvas.jp-TorchDbg-heatmap');
  await expect(heat).toBeVisible({ timeout: 30000 });
  const box = await heat.boundingBox();
  expect(box!.height).toBeGreaterThanOrEqual(60);
  const scale = track.locator('.jp-TorchDbg-heatScale');
  await expect(scale.locator('.jp-TorchDbg-heatScaleMin')).toHaveText(/\d/);
  await expect(scale.locator('.jp-TorchDbg-heatScaleMax')).toHaveText(/\d/);

  const panelBox = await page.locator(PANEL).boundingBox();
  expect(Math.round(panelBox!.width)).toBeLessThanOrEqual(260);
  for (const theme of ['light', 'dark']) {
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
      await page.waitForTimeout(500);
    }
    await card.scrollIntoViewIfNeeded();
    await card.screenshot({
      path: testInfo.outputPath(`series-log-smooth-${theme}.png`)
    });
    await heat.scrollIntoViewIfNeeded();
    await track.screenshot({
      path: testInfo.outputPath(`grads-heatmap-${theme}.png`)
    });
    const mem = page.locator(`${PANEL} .jp-TorchDbg-deviceCard`).first();
    if (await mem.isVisible()) {
      await mem.scrollIntoViewIfNeeded();
      await mem.screenshot({
        path: testInfo.outputPath(`memory-timeline-${theme}.png`)
      });
    }
  }
  await page.theme.setLightTheme();
});
