/**
 * Live training control in Chromium: during an exploding run, clip at 1.0 from
 * the panel; pause (the status bar says so and the step stops), resume. An
 * idle kernel disables Pause and the LR controls; the LR sequence of #14 ends
 * with the panel's lr equal to the optimizer's; the first action of a fresh
 * kernel's first run applies while the cell runs.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  explodingRnnCell,
  notebookWithPanel,
  PANEL,
  setSectionOpen,
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
    // slow first steps: the clip lands before the run can explode, however loaded
    // the machine (unclipped, it explodes at step 5 and overflows by step 17)
    'time.sleep(0.5 if step < 20 else 0.03)'
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

  // the paused loop sits at a safe point: Save checkpoint is served there at once
  // (before, it waited 60 s for a step that never came and was refused)
  await setSectionOpen(page, 'memory', true);
  const memory = page.locator(`${PANEL} [data-section="memory"]`);
  await memory.getByRole('button', { name: 'Save checkpoint' }).click();
  await expect(memory.locator('.jp-TorchDbg-note')).toContainText(
    'Checkpoint saved',
    { timeout: 15000 }
  );
  expect(await stepText()).toBe(pausedAt); // still held: no step ran
  await setSectionOpen(page, 'memory', false);

  // single step, then resume to the end
  await control.getByRole('button', { name: 'Step', exact: true }).click();
  await expect
    .poll(async () => /step (\d+)/.exec(await stepText())?.[1], {
      timeout: 20000
    })
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

/** A small regression with large targets: gradient norms far above 1 for hundreds of steps. */
const REGRESSION = [
  'import time, torch',
  'from torch import nn',
  'torch.manual_seed(0)',
  'model = nn.Linear(4, 1)',
  'opt = torch.optim.SGD(model.parameters(), lr=0.1)',
  'x, y = 0.1 * torch.randn(64, 4), 100 * torch.randn(64, 1)'
].join('\n');

const lrInput = (page: import('@jupyterlab/galata').IJupyterLabPageFixture) =>
  page
    .locator(`${PANEL} [data-section="control"] .jp-TorchDbg-lrInput`)
    .first();

/** The text printed by cell `index` so far. */
async function cellOutput(
  page: import('@jupyterlab/galata').IJupyterLabPageFixture,
  index: number
): Promise<string> {
  return (
    (await page
      .locator('.jp-NotebookPanel .jp-Cell')
      .nth(index)
      .locator('.jp-OutputArea')
      .textContent()) ?? ''
  );
}

test('an idle kernel disables Pause, Step and the LR controls', async ({
  page
}, testInfo) => {
  test.setTimeout(180000);
  await notebookWithPanel(page, 'control-rest.ipynb');
  const control = page.locator(`${PANEL} [data-section="control"]`);
  await setSectionOpen(page, 'control', true);
  // nothing imported, nothing trained: never "Running"
  await expect(control.locator('.jp-TorchDbg-controlState')).toContainText(
    'Idle: nothing is training'
  );
  await expect(control.getByRole('button', { name: 'Pause' })).toBeDisabled();
  // a short run, then idle again: Pause and the LR controls go off, with why
  await setSource(page, 0, REGRESSION);
  await setSource(
    page,
    1,
    [
      'for step in range(20):',
      '    opt.zero_grad()',
      '    nn.functional.mse_loss(model(x), y).backward()',
      '    opt.step()'
    ].join('\n')
  );
  await page.notebook.runCell(0, true);
  await page.notebook.runCell(1, true);
  await expect(control.locator('.jp-TorchDbg-controlState')).toContainText(
    'Idle: nothing is training',
    { timeout: 20000 }
  );
  await expect(control.getByRole('button', { name: 'Pause' })).toBeDisabled();
  await expect(control.getByRole('button', { name: 'Pause' })).toHaveAttribute(
    'title',
    'Idle: nothing is training'
  );
  await expect(control.getByRole('button', { name: 'LR ×0.5' })).toBeDisabled();
  await expect(lrInput(page)).toBeDisabled();
  await expect(lrInput(page)).toHaveAttribute('title', /nothing is training/);
  // the last run's lr, as the optimizer has it
  await expect(lrInput(page)).toHaveValue('0.1');
  await control.screenshot({
    path: testInfo.outputPath('control-idle-light.png')
  });
  await page.theme.setDarkTheme();
  await page.waitForTimeout(500);
  await control.screenshot({
    path: testInfo.outputPath('control-idle-dark.png')
  });
  await page.theme.setLightTheme();
});

test('the LR sequence from #14 ends with the panel showing the optimizer’s lr; Reset LR after the run', async ({
  page
}) => {
  test.setTimeout(240000);
  await notebookWithPanel(page, 'control-lr.ipynb');
  const control = page.locator(`${PANEL} [data-section="control"]`);
  await setSectionOpen(page, 'control', true);
  await setSource(page, 0, REGRESSION);
  // the cell sets lr=0.5 itself, trains ~5 s, and prints the optimizer's lr
  await setSource(
    page,
    1,
    [
      'for g in opt.param_groups:',
      '    g["lr"] = 0.5',
      'for step in range(250):',
      '    opt.zero_grad()',
      '    nn.functional.mse_loss(model(x), y).backward()',
      '    opt.step()',
      '    time.sleep(0.02)',
      'print("lr", opt.param_groups[0]["lr"])'
    ].join('\n')
  );
  await page.notebook.runCell(0, true);
  const halve = control.getByRole('button', { name: 'LR ×0.5' });
  const reset = control.getByRole('button', { name: 'Reset LR' });
  const state = control.locator('.jp-TorchDbg-controlState');

  for (const round of [1, 2]) {
    const run = page.notebook.runCell(1, true);
    await expect(state).toContainText('Running', { timeout: 30000 });
    // the panel shows the optimizer's lr (the cell set 0.5), nothing changed yet
    await expect(lrInput(page)).toHaveAttribute('data-lr', '0.5');
    await expect(reset).toBeDisabled();
    await halve.click();
    await expect(lrInput(page)).toHaveAttribute('data-lr', '0.25');
    await expect(control.locator('.jp-TorchDbg-lrChip')).toHaveText('lr 0.25');
    await expect(reset).toBeEnabled();
    await run;
    await expect.poll(() => cellOutput(page, 1)).toContain('lr 0.25');
    // idle: the lr shown stays true; Reset LR still works after the run (#22)
    await expect(state).toContainText('Idle: nothing is training', {
      timeout: 20000
    });
    await expect(halve).toBeDisabled();
    const printed = /lr ([\d.e-]+)/.exec(await cellOutput(page, 1))![1];
    await expect(lrInput(page)).toHaveAttribute(
      'data-lr',
      String(Number(printed))
    );
    expect(printed).toBe(round > 0 ? '0.25' : '');
    await expect(reset).toBeEnabled();
    await reset.click();
    await expect(lrInput(page)).toHaveAttribute('data-lr', '0.5');
    await expect(reset).toBeDisabled();
  }
});

test('the first action of the first run of a fresh kernel applies while the cell runs', async ({
  page
}) => {
  test.setTimeout(180000);
  await notebookWithPanel(page, 'control-first.ipynb');
  const control = page.locator(`${PANEL} [data-section="control"]`);
  await setSectionOpen(page, 'control', true);
  // one cell: the kernel's first torch import, first optimizer, first run
  await setSource(
    page,
    0,
    [
      REGRESSION,
      'opt.param_groups[0]["lr"] = 1e-4',
      'seen = None',
      'for step in range(1, 401):',
      '    opt.zero_grad()',
      '    nn.functional.mse_loss(model(x), y).backward()',
      '    opt.step()',
      '    norm = torch.stack([p.grad.norm() for p in model.parameters()]).norm().item()',
      '    if seen is None and norm <= 1.0 + 1e-4:',
      '        seen = step',
      '        print("clipped at step", step, flush=True)',
      '    time.sleep(0.025)',
      'print("done at step", step, "clipped from", seen)'
    ].join('\n')
  );
  const run = page.notebook.runCell(0, true);
  await expect(control.locator('.jp-TorchDbg-controlState')).toContainText(
    'Running',
    { timeout: 60000 }
  );
  await control.getByRole('button', { name: 'Clip', exact: true }).click();
  // the cell itself sees clipped gradients while it still runs
  await expect
    .poll(() => cellOutput(page, 0), { timeout: 8000 })
    .toContain('clipped at step');
  await expect(page.locator('.jp-Cell .jp-InputPrompt').first()).toContainText(
    '*'
  );
  await run;
  const out = await cellOutput(page, 0);
  const at = Number(/clipped at step (\d+)/.exec(out)![1]);
  expect(out).toContain('done at step 400');
  expect(at).toBeLessThan(400);
});
