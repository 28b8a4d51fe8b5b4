/**
 * JupyterLab's own kernel status while a cell trains: it stays "busy" after the
 * panel's actions (answered on a kernel subshell, whose busy / idle statuses
 * JupyterLab used to take for the kernel's), while paused, and is "idle" once
 * the cell ends (kernel/shell_status.py).
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';

import {
  explodingRnnCell,
  notebookWithPanel,
  PANEL,
  setSectionOpen,
  setSource
} from './helpers';

test.use({ autoGoto: true, kernels: null });

/** The kernel status JupyterLab holds for the current notebook ("busy", "idle"…). */
async function kernelStatus(page: IJupyterLabPageFixture): Promise<string> {
  return page.evaluate(() => {
    const app = (window as any).jupyterapp;
    return String(
      app.shell.currentWidget?.sessionContext?.session?.kernel?.status ?? ''
    );
  });
}

test('the kernel shows busy after panel actions while the cell trains, idle after', async ({
  page
}) => {
  test.setTimeout(240000);
  await notebookWithPanel(page, 'kernel-status.ipynb');
  await setSource(page, 0, 'import torch');
  await page.notebook.runCell(0, true);
  await setSource(
    page,
    1,
    explodingRnnCell({
      steps: 400,
      body: [
        'opt.zero_grad()',
        'nn.functional.mse_loss(model(x), y).backward()',
        'opt.step()',
        'time.sleep(0.03)'
      ]
    })
  );
  const run = page.notebook.runCell(1, true);
  await setSectionOpen(page, 'control', true);
  const control = page.locator(`${PANEL} [data-section="control"]`);
  await expect(control).toContainText('Running', { timeout: 30000 });
  expect(await kernelStatus(page)).toBe('busy');

  await control.getByRole('button', { name: 'Pause' }).click();
  const status = page.locator('.jp-TorchDbg-status');
  await expect(status).toContainText(/paused at step \d+/, { timeout: 20000 });
  // the subshell's busy / idle for the action have come and gone: still busy
  await page.waitForTimeout(1500);
  expect(await kernelStatus(page)).toBe('busy');
  await expect(
    page.locator('.jp-Notebook-ExecutionIndicator').first()
  ).toHaveAttribute('data-status', 'busy');

  await control.getByRole('button', { name: 'Resume' }).click();
  await expect(status).not.toContainText('paused');
  await page.waitForTimeout(1000);
  expect(await kernelStatus(page)).toBe('busy');

  await run;
  await expect.poll(() => kernelStatus(page), { timeout: 30000 }).toBe('idle');
});
