/**
 * Gradient monitor in Chromium: a model whose gradients explode; while the cell
 * runs the charts update and the alarm names the layer.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  explodingRnnCell,
  notebookWithPanel,
  PANEL,
  replayFrom,
  setSource
} from './helpers';

test.use({ autoGoto: true, kernels: null });

// Default settings (no watch(), automatic stride): the auto mode samples every step
// for the first steps of a run, so this early blow-up is seen step by step.
const TRAIN = explodingRnnCell({
  imports: ['from jupyterlab_torchdbg import log'],
  steps: 400,
  beforeLoop: ['crit = nn.MSELoss()'],
  body: [
    'opt.zero_grad()',
    'loss = crit(model(x), y)',
    'log(loss=loss)',
    'loss.backward()',
    'opt.step()',
    'time.sleep(0.01)'
  ]
});

test('exploding gradients: live charts and an alarm naming the layer', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'explode.ipynb');
  await setSource(page, 0, TRAIN);
  const run = page.notebook.runCell(0, true);
  const grads = page.locator(`${PANEL} [data-section="grads"]`);
  const track = grads.locator('.jp-TorchDbg-track[data-track="opt"]');
  await expect(track).toBeVisible({ timeout: 30000 });
  // the panel says why it samples every step although the mode is auto
  await expect(track.locator('.jp-TorchDbg-trackMeta')).toContainText(
    /every step \(auto: (first steps of the run|norm climbing)\)/
  );
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
  // the NaN is caught at its own step, before the weights change, and its cause is
  // named there: the gradient values are finite, their float32 norm overflows
  const cause = track.locator(
    '.jp-TorchDbg-alert[data-kind="non_finite_cause"]'
  );
  await expect(cause).toBeVisible({ timeout: 20000 });
  await expect(cause).toContainText(/norm overflows float32/);
  await expect(cause).toContainText(/model\.(rnn|head)/);
  // one click replays that step under anomaly detection on the weights before it,
  // and it reproduces: the same overflow, on the same weights
  const replay = await replayFrom(track, cause);
  await expect(replay.locator('.jp-TorchDbg-replay')).toHaveAttribute(
    'data-cause',
    'overflow'
  );
  await expect(replay).toContainText(/pre-step weights/);
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('grads-replay-light.png') });
  const nonFinite = cause;
  // clicking an alarm's step marks it (no error), the table lists the layers
  // (one name cell each, on its own line at this width)
  await nonFinite.locator('.jp-TorchDbg-alertStep').click();
  await expect(
    track.locator('.jp-TorchDbg-layerTable tbody td.jp-TorchDbg-layerName')
  ).toHaveCount(2);
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
