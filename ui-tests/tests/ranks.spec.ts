/**
 * Multi-process training from the notebook (#15), in Chromium with a real
 * kernel: after `%load_ext jupyterlab_torchdbg` a cell writes a worker module
 * and runs a 2-rank gloo DDP job with `torch.multiprocessing.spawn` (CPU, a
 * tiny model, ~15 s). The Ranks section appears with the job (not before) and
 * its grid shows both ranks stepping; "Pause all" holds both at the same step
 * (the ack names it) and "Resume all" lets them go on; when the job ends the
 * actions are off with the reason. Nothing scrolls sideways at the default
 * sidebar width; screenshots light and dark.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  notebookForRanks,
  notebookWithPanel,
  rankWorkerSetup,
  PANEL,
  setSectionOpen,
  setSource,
  spawnLaunch,
  sidebarWidth,
  sidewaysScroll
} from './helpers';

test.use({ autoGoto: true, kernels: null });

/** The worker module: one DDP rank training a tiny linear model, a short sleep a step. */
const WORKER = [
  'import os, time',
  'import torch',
  'import torch.distributed as dist',
  'from torch import nn',
  '',
  '',
  'def run(rank, world, port, steps, fail_rank=-1):',
  '    os.environ["MASTER_ADDR"] = "127.0.0.1"',
  '    os.environ["MASTER_PORT"] = str(port)',
  '    dist.init_process_group("gloo", rank=rank, world_size=world)',
  '    torch.manual_seed(0)',
  '    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))',
  '    opt = torch.optim.SGD(model.parameters(), lr=0.01)',
  '    g = torch.Generator().manual_seed(rank)',
  '    x, y = torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)',
  '    for step in range(steps):',
  '        if rank == fail_rank and step == 20:',
  '            raise RuntimeError(f"rank {rank} gave up at step {step}")',
  '        opt.zero_grad()',
  '        nn.functional.mse_loss(model(x), y).backward()',
  '        opt.step()',
  '        time.sleep(0.05)',
  '    dist.destroy_process_group()',
  ''
].join('\n');

const SETUP = rankWorkerSetup('ddp_worker', WORKER);

const LAUNCH = spawnLaunch('ddp_worker', '2, PORT, 300');

/** The scroll areas that must never scroll sideways. */
const NO_SIDEWAYS = [
  PANEL,
  `${PANEL} .jp-TorchDbg-body`,
  `${PANEL} [data-section="ranks"] .jp-TorchDbg-sectionBody`,
  `${PANEL} .jp-TorchDbg-rankGrid`,
  `${PANEL} .jp-TorchDbg-rankRow`,
  `${PANEL} .jp-TorchDbg-ranksActions`
];

test('a 2-rank DDP job from the notebook: the rank grid live, pause and resume all ranks', async ({
  page
}, testInfo) => {
  test.setTimeout(300000);
  await notebookWithPanel(page, 'ranks.ipynb');
  const panelWidth = await page.locator(PANEL).evaluate(el => el.clientWidth);
  testInfo.annotations.push({
    type: 'sidebar width',
    description: `${panelWidth} px`
  });
  // the DDP job's figures are in the Ranks section: keep the others out of the way
  for (const id of ['series', 'grads', 'control', 'memory']) {
    await setSectionOpen(page, id, false);
  }
  await setSource(page, 0, SETUP);
  await page.notebook.runCell(0, true);
  const section = page.locator(`${PANEL} [data-section="ranks"]`);
  // no job yet: no section (no empty box)
  await expect(section).toHaveCount(0);

  await setSource(page, 1, LAUNCH);
  const run = page.notebook.runCell(1, true);
  await expect(section).toBeVisible({ timeout: 90000 });
  await setSectionOpen(page, 'ranks', true);
  const rows = section.locator('.jp-TorchDbg-rankRow');
  await expect(rows).toHaveCount(2, { timeout: 60000 });
  await expect(section.locator('.jp-TorchDbg-ranksHeader')).toContainText(
    '2 ranks'
  );
  await expect(section.locator('.jp-TorchDbg-ranksHeader')).toContainText(
    'running'
  );
  const steps = async () =>
    Promise.all(
      [0, 1].map(async i => Number(await rows.nth(i).getAttribute('data-step')))
    );
  // both ranks stepping: each rank's step count grows
  await expect
    .poll(async () => Math.min(...(await steps())), { timeout: 60000 })
    .toBeGreaterThan(5);
  const before = await steps();
  await expect
    .poll(
      async () => {
        const now = await steps();
        return now[0] > before[0] && now[1] > before[1];
      },
      { timeout: 30000 }
    )
    .toBe(true);
  await expect(rows.nth(0).locator('.jp-TorchDbg-rankGrad')).not.toHaveText(
    '—',
    {
      timeout: 20000
    }
  );
  // the per-rank charts have points
  await expect(section.locator('.jp-TorchDbg-rankLegend li')).toHaveCount(2, {
    timeout: 20000
  });
  // Training control (the kernel's own loop is idle): says a rank job runs,
  // not "Idle", and leads to the all-rank controls (#22)
  await setSectionOpen(page, 'control', true);
  const control = page.locator(`${PANEL} [data-section="control"]`);
  await expect(control.locator('.jp-TorchDbg-controlStateText')).toHaveText(
    'A 2-rank job is running: use the all-rank controls in Ranks.'
  );
  await expect(control.getByRole('button', { name: 'Pause' })).toHaveAttribute(
    'title',
    'A 2-rank job is running: use the all-rank controls in Ranks.'
  );
  await sidebarWidth(page, 250);
  await control.screenshot({
    path: testInfo.outputPath('control-rank-job-light.png')
  });
  await page.theme.setDarkTheme();
  await control.screenshot({
    path: testInfo.outputPath('control-rank-job-dark.png')
  });
  await page.theme.setLightTheme();
  await control.getByRole('button', { name: 'Go to Ranks' }).click();
  await expect(section).toBeInViewport();
  await setSectionOpen(page, 'control', false);

  // Pause all: both ranks held at the same step, the ack names it. A rank that
  // does not answer within 2 s (a loaded machine) is a refusal with the reason:
  // the user clicks again, and so does this test, once.
  const note = section.locator('.jp-TorchDbg-ranksNote');
  const answered = async () => {
    await expect(note).toHaveAttribute('data-kind', /^(ack|refused)$/, {
      timeout: 20000
    });
    return note.getAttribute('data-kind');
  };
  await section.getByRole('button', { name: 'Pause all' }).click();
  if ((await answered()) === 'refused') {
    testInfo.annotations.push({
      type: 'pause refused once',
      description: (await note.textContent()) ?? ''
    });
    await section.getByRole('button', { name: 'Pause all' }).click();
    await answered();
  }
  await expect(note).toHaveAttribute('data-kind', 'ack');
  await expect(note).toHaveText(/^pause at step \d+ on ranks 0, 1$/);
  const atStep = Number(
    /step (\d+)/.exec((await note.textContent()) ?? '')![1]
  );
  await expect(rows.nth(0)).toHaveAttribute('data-state', 'paused', {
    timeout: 30000
  });
  await expect(rows.nth(1)).toHaveAttribute('data-state', 'paused', {
    timeout: 30000
  });
  const held = await steps();
  expect(held[0]).toBe(held[1]);
  // held before the agreed optimizer step: at most that many steps taken
  expect(held[0]).toBeGreaterThanOrEqual(atStep - 1);
  expect(held[0]).toBeLessThanOrEqual(atStep);
  await expect(section.locator('.jp-TorchDbg-ranksHeader')).toContainText(
    `paused at step ${atStep}`
  );
  await page.waitForTimeout(1500);
  expect(await steps()).toEqual(held);
  await expect(page.locator('.jp-Cell .jp-InputPrompt').nth(1)).toContainText(
    '*'
  );

  // at the default sidebar width nothing scrolls sideways; light and dark
  expect.soft(await sidewaysScroll(page, NO_SIDEWAYS)).toEqual([]);
  await section.scrollIntoViewIfNeeded();
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('ranks-paused-light.png') });
  await section.screenshot({
    path: testInfo.outputPath('ranks-section-light.png')
  });
  await page.theme.setDarkTheme();
  await page.waitForTimeout(500);
  expect.soft(await sidewaysScroll(page, NO_SIDEWAYS)).toEqual([]);
  await section.scrollIntoViewIfNeeded();
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('ranks-paused-dark.png') });
  await section.screenshot({
    path: testInfo.outputPath('ranks-section-dark.png')
  });
  await page.theme.setLightTheme();

  // Resume all: both ranks step on from where they were held
  await section.getByRole('button', { name: 'Resume all' }).click();
  await expect(note).toHaveText(/^resumed ranks 0, 1$/, { timeout: 20000 });
  await expect
    .poll(async () => Math.min(...(await steps())), { timeout: 30000 })
    .toBeGreaterThan(held[0]);
  await expect(rows.nth(0)).not.toHaveAttribute('data-state', 'paused');

  // the job ends with the cell: the actions are off, with the reason
  await run;
  await expect(section.locator('.jp-TorchDbg-ranksHeader')).toContainText(
    'ended',
    { timeout: 60000 }
  );
  await expect(steps()).resolves.toEqual([300, 300]);
  const pause = section.getByRole('button', { name: 'Pause all' });
  await expect(pause).toBeDisabled();
  await expect(pause).toHaveAttribute(
    'title',
    'The job has ended: no rank is left to act on.'
  );
  await section.screenshot({
    path: testInfo.outputPath('ranks-ended-light.png')
  });
});

test('a rank that raises: the exception view names the rank, the grid marks it failed', async ({
  page
}, testInfo) => {
  test.setTimeout(240000);
  await notebookForRanks(page, 'ranks-fail.ipynb');
  await setSource(page, 0, SETUP);
  await page.notebook.runCell(0, true);
  await setSource(
    page,
    1,
    [
      'import torch.multiprocessing as mp',
      'import ddp_worker',
      'mp.spawn(ddp_worker.run, args=(2, PORT, 200, 1), nprocs=2, join=True)'
    ].join('\n')
  );
  await page.notebook.runCell(1, true);
  const rankLine = page.locator(`${PANEL} .jp-TorchDbg-excRank`);
  await expect(rankLine).toHaveText(/^Rank 1 of 2 · .+ · pid \d+$/, {
    timeout: 60000
  });
  await expect(page.locator(`${PANEL} .jp-TorchDbg-excMessage`)).toContainText(
    'rank 1 gave up at step 20'
  );
  const failed = page.locator(
    `${PANEL} [data-section="ranks"] .jp-TorchDbg-rankRow[data-rank="1"]`
  );
  await expect(failed).toHaveAttribute('data-state', 'failed', {
    timeout: 30000
  });
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('ranks-failed-light.png') });
});
