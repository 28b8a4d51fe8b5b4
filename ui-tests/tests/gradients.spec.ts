/**
 * Gradient monitor in Chromium: a model whose gradients explode; while the cell
 * runs the charts update and the alarm names the layer.
 */
import { expect, test } from '@jupyterlab/galata';

import { notebookWithPanel, PANEL, setSource } from './helpers';

test.use({ autoGoto: true, kernels: null });

const TRAIN = [
  'import time, torch',
  'from torch import nn',
  'from jupyterlab_torchdbg import log, watch',
  'torch.manual_seed(0)',
  'class Net(nn.Module):',
  '    def __init__(self):',
  '        super().__init__()',
  '        self.rnn = nn.RNN(4, 32, batch_first=True)',
  '        self.head = nn.Linear(32, 1)',
  '    def forward(self, x):',
  '        out, _ = self.rnn(x)',
  '        return self.head(out[:, -1])',
  'model = Net()',
  'opt = torch.optim.SGD(model.parameters(), lr=0.5)',
  '# every step: by default the monitor samples every N steps (N from its own cost),',
  '# and a run that blows up within N steps would only show the non-finite alarm',
  'watch(model, opt, stride=1)',
  'x, y = torch.randn(16, 30, 4), torch.randn(16, 1)',
  'for step in range(400):',
  '    opt.zero_grad()',
  '    loss = nn.functional.mse_loss(model(x), y)',
  '    log(loss=loss)',
  '    loss.backward()',
  '    opt.step()',
  '    time.sleep(0.01)'
].join('\n');

test('exploding gradients: live charts and an alarm naming the layer', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'explode.ipynb');
  await setSource(page, 0, TRAIN);
  const run = page.notebook.runCell(0, true);
  const grads = page.locator(`${PANEL} [data-section="grads"]`);
  const track = grads.locator('.jp-TorchDbg-track[data-track="opt"]');
  await expect(track).toBeVisible({ timeout: 30000 });
  // alarms name the layer while the cell is still running
  const alert = track.locator('.jp-TorchDbg-alert[data-kind="explosion"]');
  await expect(alert).toBeVisible({ timeout: 30000 });
  await expect(alert).toContainText(/model\.(rnn|head)/);
  await expect(page.locator('.jp-Cell .jp-InputPrompt').first()).toContainText(
    '*'
  );
  await expect(track.locator('.jp-TorchDbg-heatmap')).toBeVisible();
  await expect(track.locator('canvas').first()).toBeVisible();
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('grads-live-light.png') });
  await run;
  const nonFinite = track.locator('.jp-TorchDbg-alert[data-kind="non_finite"]');
  await expect(nonFinite).toBeVisible({ timeout: 20000 });
  await expect(nonFinite).toContainText(/model\.(rnn|head)/);
  // clicking an alarm's step marks it (no error), the table lists the layers
  await nonFinite.locator('.jp-TorchDbg-alertStep').click();
  await expect(track.locator('.jp-TorchDbg-layerTable tbody tr')).toHaveCount(
    2
  );
  // logged loss lives in its own section, grad series are not duplicated there
  await expect(
    page.locator(`${PANEL} [data-section="series"] .jp-TorchDbg-seriesCard`)
  ).toHaveCount(1);
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('grads-done-light.png') });
  await page.theme.setDarkTheme();
  await page.waitForTimeout(500);
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('grads-done-dark.png') });
  await page.theme.setLightTheme();
});
