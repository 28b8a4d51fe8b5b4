/**
 * Live training control in Chromium: during an exploding run, clip at 1.0 from
 * the panel; pause (the status bar says so and the step stops), resume.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  explodingRnnCell,
  notebookWithPanel,
  PANEL,
  setSource
} from './helpers';

test.use({ autoGoto: true, kernels: null });

const TRAIN = explodingRnnCell({
  beforeLoop: ['done = 0'],
  steps: 150,
  body: [
    'opt.zero_grad()',
    'nn.functional.mse_loss(model(x), y).backward()',
    'opt.step()',
    'done += 1',
    'time.sleep(0.03)'
  ]
});

test('clip at 1.0 and pause / resume while the cell runs', async ({
  page
}, testInfo) => {
  test.setTimeout(240000);
  await notebookWithPanel(page, 'control.ipynb');
  await setSource(page, 0, 'import torch');
  await page.notebook.runCell(0, true);
  await setSource(page, 1, TRAIN);
  const run = page.notebook.runCell(1, true);
  const control = page.locator(`${PANEL} [data-section="control"]`);
  await expect(control).toContainText('Running', { timeout: 30000 });

  // one click: clip at 1.0 (the default in the field)
  await control.getByRole('button', { name: 'Clip', exact: true }).click();
  await expect(control.locator('.jp-TorchDbg-controlState')).toContainText(
    'clip 1'
  );
  const status = page.locator('.jp-TorchDbg-status');
  await expect(status).toContainText('clip 1');

  // pause: the status bar says where, the step counter stops, the cell keeps running
  await control.getByRole('button', { name: 'Pause' }).click();
  await expect(status).toContainText(/paused at step \d+/, { timeout: 20000 });
  const stepText = async () =>
    (await control.locator('.jp-TorchDbg-controlState').textContent()) ?? '';
  // (while running the state line says so; the step number shows while paused)
  const pausedAt = await stepText();
  await page.waitForTimeout(1000);
  expect(await stepText()).toBe(pausedAt);
  await expect(page.locator('.jp-Cell .jp-InputPrompt').nth(1)).toContainText(
    '*'
  );
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('control-paused.png') });

  // single step, then resume to the end
  await control.getByRole('button', { name: 'Step', exact: true }).click();
  await expect
    .poll(async () => /step (\d+)/.exec(await stepText())?.[1])
    .not.toBe(/step (\d+)/.exec(pausedAt)?.[1]);
  await control.getByRole('button', { name: 'Resume' }).click();
  await expect(status).not.toContainText('paused');
  await run;
  // with clipping from early on, the run never produced non-finite gradients
  await expect(
    page.locator(`${PANEL} .jp-TorchDbg-alert[data-kind^="non_finite"]`)
  ).toHaveCount(0);
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('control-clipped.png') });
});
