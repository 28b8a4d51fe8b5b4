/**
 * Memory panel in Chromium on a CPU-only kernel: the "no CUDA device" state with
 * the CPU breakdown while a cell trains, and the OOM autopsy of a simulated
 * CUDA out-of-memory error.
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
