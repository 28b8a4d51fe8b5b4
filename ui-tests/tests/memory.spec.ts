/**
 * Memory panel in Chromium on a CPU-only kernel: the "no CUDA device" state with
 * the CPU breakdown and the process RSS timeline while a cell trains, the OOM
 * autopsy of a simulated CUDA out-of-memory error, and the top allocation sites
 * of a memory-history recording (the recorder replays a synthetic snapshot: the
 * stop goes through the real action, file and status).
 */
import { expect, test } from '@jupyterlab/galata';

import { notebookWithPanel, PANEL, setSource } from './helpers';

test.use({ autoGoto: true, kernels: null });

test('CPU breakdown while training, then an OOM autopsy', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'memory.ipynb');
  await setSource(
    page,
    0,
    [
      'import time, torch',
      'from torch import nn',
      'model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))',
      'opt = torch.optim.Adam(model.parameters())',
      'x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))',
      'for step in range(100):',
      '    opt.zero_grad()',
      '    nn.functional.cross_entropy(model(x), y).backward()',
      '    opt.step()',
      '    time.sleep(0.02)'
    ].join('\n')
  );
  await page.notebook.runCell(0, true);
  const mem = page.locator(
    `${PANEL} [data-section="memory"] .jp-TorchDbg-memory`
  );
  await expect(mem).toHaveAttribute('data-state', 'no_cuda', {
    timeout: 30000
  });
  await expect(mem.locator('.jp-TorchDbg-stateText')).toContainText(
    /no CUDA device/i
  );
  const cpu = mem.locator('.jp-TorchDbg-breakdown[data-device="cpu"]');
  await expect(cpu).toBeVisible({ timeout: 30000 });
  await expect(cpu).toContainText('parameters');
  await expect(cpu).toContainText('optimizer state');
  // the CPU-only state's timeline: the process RSS drawn by uPlot
  const rss = mem.locator('.jp-TorchDbg-rssCard[data-series="mem/cpu/rss"]');
  await expect(rss).toContainText('process RSS');
  await expect(rss.locator('.jp-TorchDbg-chartHost canvas')).toBeVisible();
  await expect(rss).not.toContainText('fills while a cell runs');
  await page
    .locator(`${PANEL} [data-section="memory"]`)
    .screenshot({ path: testInfo.outputPath('memory-cpu.png') });

  // a simulated CUDA OOM (the real message text) gets an autopsy with remedies
  await setSource(
    page,
    1,
    [
      'raise torch.cuda.OutOfMemoryError(',
      '    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB "',
      '    "of which 1.06 GiB is free. Of the allocated memory 13.20 GiB is allocated by PyTorch, "',
      '    "and 0.95 GiB is reserved by PyTorch but unallocated.")'
    ].join('\n')
  );
  await page.notebook.runCell(1, true);
  const exc = page.locator(`${PANEL} .jp-TorchDbg-exception`);
  await expect(exc).toHaveAttribute('data-category', 'out_of_memory', {
    timeout: 30000
  });
  await expect(exc.locator('.jp-TorchDbg-headline')).toContainText('2');
  const oom = page.locator(`${PANEL} .jp-TorchDbg-oom`);
  await expect(oom).toBeVisible({ timeout: 30000 });
  await expect(oom.locator('.jp-TorchDbg-remedies li').first()).toBeVisible();
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('memory-oom.png') });

  // release references: one click, a clear note that %debug on that error is gone
  await page
    .locator(`${PANEL} [data-section="memory"]`)
    .getByRole('button', { name: 'Release references' })
    .click();
  await expect(
    page.locator(`${PANEL} [data-section="memory"] .jp-TorchDbg-note`)
  ).toContainText('%debug');
});

/** A snapshot shaped like torch.cuda.memory._snapshot(), with a hostile name. */
const REPLAY_CELL = [
  'import torch',
  'from jupyterlab_torchdbg.testing import memory_monitor',
  'from jupyterlab_torchdbg.kernel.memory.recording import ReplayHistory',
  'def fr(f, l, n): return {"filename": f, "line": l, "name": n}',
  'fwd = [fr("/venv/site-packages/torch/nn/modules/linear.py", 125, "forward"),',
  '       fr("/home/me/project/model.py", 42, "forward")]',
  'bad = [fr("/home/me/project/data.py", 7,',
  '          \'<img src=x onerror="document.body.dataset.pwned=1">\')]',
  'snap = {"segments": [{"blocks": [',
  '    {"size": 48 << 20, "state": "active_allocated", "frames": fwd},',
  '    {"size": 6 << 20, "state": "inactive", "frames": bad}]}],',
  '  "device_traces": [[',
  '    {"action": "alloc", "size": 48 << 20, "frames": fwd},',
  '    {"action": "alloc", "size": 16 << 20, "frames": fwd},',
  '    {"action": "alloc", "size": 6 << 20, "frames": bad},',
  '    {"action": "free_requested", "size": 6 << 20, "frames": bad}]]}',
  'recorder = memory_monitor().recorder',
  'recorder.history = ReplayHistory(snap)',
  'recorder.start(100_000)["state"]'
].join('\n');

test('memory history: stop lists the top allocation sites as text', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'memory-history.ipynb');
  await setSource(page, 0, REPLAY_CELL);
  await page.notebook.runCell(0, true);
  const section = page.locator(`${PANEL} [data-section="memory"]`);
  const stop = section.getByRole('button', { name: 'Stop recording' });
  await expect(stop).toBeEnabled({ timeout: 30000 });
  await stop.click();
  const snap = section.locator('.jp-TorchDbg-snapshot');
  await expect(snap).toBeVisible({ timeout: 30000 });
  await expect(section.locator('.jp-TorchDbg-note')).toContainText(
    'Memory snapshot saved'
  );
  const file = await snap.getAttribute('data-file');
  expect(file).toMatch(/^torchdbg_memory_\d{8}-\d{6}\.pickle$/);
  await expect(snap.locator('.jp-TorchDbg-snapshotFile code')).toHaveText(
    file!
  );
  await expect(snap.locator('.jp-TorchDbg-snapshotHowto')).toContainText(
    "PyTorch's memory viewer"
  );
  await expect(snap.locator('.jp-TorchDbg-snapshotCommand')).toHaveText(
    `python -m torch.cuda._memory_viz trace_plot ${file} -o ${file!.replace('.pickle', '.html')}`
  );
  const rows = snap.locator('.jp-TorchDbg-sites tbody tr');
  await expect(rows).toHaveCount(2);
  await expect(rows.nth(0)).toContainText('project/model.py:42 forward');
  await expect(rows.nth(0)).toContainText('64.0 MiB');
  // the hostile function name is text: no element made of it, nothing ran (S1)
  await expect(rows.nth(1)).toContainText('<img src=x onerror=');
  await expect(snap.locator('img')).toHaveCount(0);
  expect(
    await page.evaluate(() => document.body.dataset.pwned ?? null)
  ).toBeNull();
  await snap.scrollIntoViewIfNeeded();
  await snap.screenshot({
    path: testInfo.outputPath('memory-history-light.png')
  });
  // still live at the stop: only the 48 MiB block
  await snap.getByRole('button', { name: /still live at stop/ }).click();
  await expect(rows).toHaveCount(1);
  await expect(rows.nth(0)).toContainText('48.0 MiB');
  await page.theme.setDarkTheme();
  await snap.scrollIntoViewIfNeeded();
  await snap.screenshot({
    path: testInfo.outputPath('memory-history-dark.png')
  });
  await section.screenshot({
    path: testInfo.outputPath('memory-cpu-dark.png')
  });
  await page.theme.setLightTheme();
});
