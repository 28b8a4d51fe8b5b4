/**
 * Palette = panel (issue #22), in Chromium with a real kernel:
 * - what the demo notebook tells a newcomer to type in the command palette
 *   finds what it names; Ctrl+Shift+Y shows the panel and hides it again;
 * - the palette's commands are enabled exactly when the panel's buttons are
 *   (CPU-only kernel: no CUDA actions; Resume only while paused), and the LR
 *   commands (×0.5, Set with a checked entry, Reset after the run) do what
 *   the panel's LR controls do;
 * - "Export All Runs and Series as CSV" saves one tidy table of every run and
 *   series beside the notebook, which one pandas.read_csv reads.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';

import {
  notebookWithPanel,
  PANEL,
  setSectionOpen,
  setSource,
  sidebarWidth
} from './helpers';

test.use({ autoGoto: true, kernels: null });

const PALETTE = '#modal-command-palette';

/**
 * Open the command palette (as Ctrl+Shift+C does), type `query` and read its
 * items (label, heading, enabled) in one go in the page; with `pick`, click
 * the enabled item of that label (as a user does), else close it. One step in
 * the page: the palette closes when focus moves (a notebook focusing its cell).
 */
async function palette(
  page: IJupyterLabPageFixture,
  query: string,
  pick?: string
): Promise<{ label: string; category: string; enabled: boolean }[]> {
  return page.evaluate(
    async ({ sel, query, pick }) => {
      const app = (window as any).jupyterapp;
      await app.commands.execute('apputils:activate-command-palette');
      const frame = () => new Promise(r => requestAnimationFrame(r));
      const input = document.querySelector(
        `${sel} .lm-CommandPalette-input`
      ) as HTMLInputElement;
      input.value = query;
      input.dispatchEvent(new Event('input', { bubbles: true }));
      await frame();
      await frame();
      const out: { label: string; category: string; enabled: boolean }[] = [];
      let category = '';
      let target: HTMLElement | null = null;
      document
        .querySelectorAll(
          `${sel} .lm-CommandPalette-header, ${sel} .lm-CommandPalette-item`
        )
        .forEach(el => {
          if (el.classList.contains('lm-CommandPalette-header')) {
            category = el.textContent ?? '';
            return;
          }
          const label =
            el.querySelector('.lm-CommandPalette-itemLabel')?.textContent ?? '';
          const enabled = !el.classList.contains('lm-mod-disabled');
          out.push({ label, category, enabled });
          if (pick && label === pick && enabled && !target) {
            target = el as HTMLElement;
          }
        });
      if (pick) {
        if (!target) {
          throw new Error(`no enabled palette item ${pick}`);
        }
        (target as HTMLElement).click();
      }
      return out;
    },
    { sel: PALETTE, query, pick }
  );
}

/** The palette's items for `query`. */
async function paletteItems(
  page: IJupyterLabPageFixture,
  query: string
): Promise<{ label: string; category: string; enabled: boolean }[]> {
  const items = await palette(page, query);
  if (await page.locator(PALETTE).isVisible()) {
    await page.keyboard.press('Escape');
  }
  await expect(page.locator(PALETTE)).toBeHidden();
  return items;
}

/** Whether the palette offers `label` (under Torch Debugger) enabled now. */
async function paletteEnabled(
  page: IJupyterLabPageFixture,
  label: string
): Promise<boolean> {
  const items = await paletteItems(page, label);
  const item = items.find(
    i => i.label === label && i.category === 'Torch Debugger'
  );
  expect(item, `palette item ${label}`).toBeTruthy();
  return item!.enabled;
}

/** Run a palette command by its label, as a click in the palette. */
async function runFromPalette(
  page: IJupyterLabPageFixture,
  label: string
): Promise<void> {
  await palette(page, label, label);
}

/** A panel button's state: absent (null), enabled (true) or disabled (false). */
async function panelButton(
  page: IJupyterLabPageFixture,
  section: string,
  name: string
): Promise<boolean | null> {
  const b = page
    .locator(`${PANEL} [data-section="${section}"]`)
    .getByRole('button', { name, exact: true });
  if ((await b.count()) === 0) {
    return null;
  }
  return b.isEnabled();
}

test('the demo’s palette words find the panel and the LR commands; Ctrl+Shift+Y toggles it', async ({
  page
}) => {
  const demo = JSON.parse(
    fs.readFileSync(
      path.resolve(__dirname, '../../examples/demo.ipynb'),
      'utf-8'
    )
  );
  const text: string = demo.cells
    .filter((c: any) => c.cell_type === 'markdown')
    .map((c: any) => c.source.join(''))
    .join('\n');
  // "the command palette (...): type `torch open` and pick **Open Panel**"
  const open =
    /command palette[^`]*type `([^`]+)` and pick \*\*([^*]+)\*\*/.exec(text);
  expect(open, 'the demo says what to type in the palette').not.toBeNull();
  const [, query, label] = open!;
  const items = await paletteItems(page, query);
  expect(items[0]).toEqual({
    label,
    category: 'Torch Debugger',
    enabled: true
  });
  // the LR commands it names under `torch lr`
  const lr = /type `(torch lr)` for (.*?), which/s.exec(text);
  expect(lr).not.toBeNull();
  const named = [...lr![2].matchAll(/\*\*([^*]+)\*\*/g)].map(m => m[1]);
  expect(named).toEqual([
    'Halve the Learning Rate (LR ×0.5)',
    'Set the Learning Rate…',
    'Reset the Learning Rate (Reset LR)'
  ]);
  const found = (await paletteItems(page, lr![1])).map(i => i.label);
  for (const name of named) {
    expect(found).toContain(name);
  }

  // pick it: the panel shows
  await runFromPalette(page, label);
  await expect(page.locator(PANEL)).toBeVisible();
  // Ctrl+Shift+Y hides it, and shows it again
  await page.keyboard.press('Control+Shift+Y');
  await expect(page.locator(PANEL)).toBeHidden();
  await page.keyboard.press('Control+Shift+Y');
  await expect(page.locator(PANEL)).toBeVisible();
});

/** Trains until `stop` (a global) is set, 20 ms a step, SGD at lr 0.5. */
const TRAIN = [
  'import time, torch',
  'from torch import nn',
  'torch.manual_seed(0)',
  'model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))',
  'opt = torch.optim.SGD(model.parameters(), lr=0.5)',
  'x, y = torch.randn(32, 4), torch.randn(32, 1)',
  'stop = False',
  'def train(steps):',
  '    for _ in range(steps):',
  '        if stop:',
  '            break',
  '        opt.zero_grad()',
  '        nn.functional.mse_loss(model(x), y).backward()',
  '        opt.step()',
  '        time.sleep(0.02)'
].join('\n');

test('palette commands are enabled as the panel’s buttons; the LR commands', async ({
  page
}, testInfo) => {
  test.setTimeout(300000);
  await notebookWithPanel(page, 'palette.ipynb');
  await setSectionOpen(page, 'control', true);
  await setSectionOpen(page, 'memory', true);
  await setSource(page, 0, TRAIN);
  await page.notebook.runCell(0, true);
  const memory = page.locator(`${PANEL} [data-section="memory"]`);
  await expect(memory).toContainText(/no CUDA device/i, { timeout: 30000 });
  const control = page.locator(`${PANEL} [data-section="control"]`);
  const lr = control.locator('.jp-TorchDbg-lrInput');

  // idle, CPU-only: no CUDA action, nothing to resume, nothing to pause
  const pairs: [string, string, string][] = [
    ['Empty CUDA Cache', 'memory', 'Empty cache'],
    ['Start Recording Memory History', 'memory', 'Record history'],
    ['Resume Training', 'control', 'Resume'],
    ['Pause Training', 'control', 'Pause']
  ];
  for (const [command, section, button] of pairs) {
    const palette = await paletteEnabled(page, command);
    expect(palette, command).toBe(false);
    expect(await panelButton(page, section, button), button).not.toBe(true);
  }

  // while it trains: Pause on in both, Resume off in both; LR ×0.5 and Set LR
  await setSource(page, 1, 'train(100000)');
  const run = page.notebook.runCell(1, true);
  await expect(control).toContainText('Running', { timeout: 30000 });
  await expect(lr).toHaveAttribute('data-lr', '0.5');
  expect(await paletteEnabled(page, 'Pause Training')).toBe(true);
  expect(await panelButton(page, 'control', 'Pause')).toBe(true);
  expect(await paletteEnabled(page, 'Resume Training')).toBe(false);
  expect(await panelButton(page, 'control', 'Resume')).toBeNull();
  expect(await paletteEnabled(page, 'Reset the Learning Rate (Reset LR)')).toBe(
    false
  );
  expect(await panelButton(page, 'control', 'Reset LR')).toBe(false);

  await runFromPalette(page, 'Halve the Learning Rate (LR ×0.5)');
  await expect(lr).toHaveAttribute('data-lr', '0.25');
  // Set: an entry that is not a learning rate is refused and asked again
  await runFromPalette(page, 'Set the Learning Rate…');
  const dialog = page.locator('.jp-Dialog');
  const field = dialog.locator('.jp-TorchDbg-lrDialogInput');
  await expect(field).toHaveValue('0.25');
  await field.fill('-1');
  await expect(dialog.locator('.jp-TorchDbg-lrDialogNote')).toContainText(
    'above 0'
  );
  await dialog.screenshot({ path: testInfo.outputPath('set-lr-dialog.png') });
  await page.keyboard.press('Enter');
  await expect(dialog.locator('.jp-TorchDbg-lrDialogNote')).toContainText(
    '“-1” is not a learning rate'
  );
  await dialog.locator('.jp-TorchDbg-lrDialogInput').fill('0.05');
  await page.keyboard.press('Enter');
  await expect(dialog).toBeHidden();
  await expect(lr).toHaveAttribute('data-lr', '0.05');
  expect(await paletteEnabled(page, 'Reset the Learning Rate (Reset LR)')).toBe(
    true
  );

  // paused (from the palette): Resume and Single Step on in both, Pause off
  await runFromPalette(page, 'Pause Training');
  await expect(control.locator('.jp-TorchDbg-controlState')).toHaveAttribute(
    'data-paused',
    'true',
    { timeout: 20000 }
  );
  expect(await paletteEnabled(page, 'Resume Training')).toBe(true);
  expect(await panelButton(page, 'control', 'Resume')).toBe(true);
  expect(await paletteEnabled(page, 'Single Step (while paused)')).toBe(true);
  expect(await paletteEnabled(page, 'Pause Training')).toBe(false);
  await runFromPalette(page, 'Resume Training');
  await expect(control.locator('.jp-TorchDbg-controlState')).toHaveAttribute(
    'data-paused',
    'false'
  );

  // the run ends: Reset LR still on (palette and panel), and it restores 0.5
  await page.evaluate(() => {
    const app = (window as any).jupyterapp;
    const kernel = app.shell.currentWidget.sessionContext.session.kernel;
    // a subshell-free way to end the loop: the kernel's own interrupt
    return kernel.interrupt();
  });
  await run;
  await expect(control).toContainText('Idle: nothing is training', {
    timeout: 20000
  });
  expect(await panelButton(page, 'control', 'Reset LR')).toBe(true);
  expect(await paletteEnabled(page, 'Halve the Learning Rate (LR ×0.5)')).toBe(
    false
  );
  await sidebarWidth(page, 250);
  await control.screenshot({
    path: testInfo.outputPath('control-reset-after-run-light.png')
  });
  await page.theme.setDarkTheme();
  await control.screenshot({
    path: testInfo.outputPath('control-reset-after-run-dark.png')
  });
  await page.theme.setLightTheme();
  await runFromPalette(page, 'Reset the Learning Rate (Reset LR)');
  await expect(lr).toHaveAttribute('data-lr', '0.5');
  await setSource(page, 2, 'print(opt.param_groups[0]["lr"])');
  await page.notebook.runCell(2, true);
  await expect(page.locator('.jp-Cell').nth(2)).toContainText('0.5');
  expect(await paletteEnabled(page, 'Reset the Learning Rate (Reset LR)')).toBe(
    false
  );
});

test('Export All Runs and Series as CSV: one tidy table beside the notebook, read by pandas', async ({
  page
}, testInfo) => {
  test.setTimeout(300000);
  await notebookWithPanel(page, 'export.ipynb');
  expect(await paletteEnabled(page, 'Export All Runs and Series as CSV')).toBe(
    false
  );
  await setSource(
    page,
    0,
    [
      TRAIN,
      'from jupyterlab_torchdbg import log',
      'def logged(n):',
      '    for i in range(n):',
      '        opt.zero_grad()',
      '        loss = nn.functional.mse_loss(model(x), y)',
      '        loss.backward()',
      '        opt.step()',
      '        log(i, loss=loss, acc=0.5)'
    ].join('\n')
  );
  await page.notebook.runCell(0, true);
  await setSource(page, 1, 'logged(30)');
  await page.notebook.runCell(1, true);
  await page.notebook.runCell(1, true); // the second run
  const series = page.locator(`${PANEL} [data-section="series"]`);
  await expect(page.locator(`${PANEL} .jp-TorchDbg-runs`)).toHaveAttribute(
    'data-shown',
    '2',
    { timeout: 20000 }
  );
  await expect(
    series.getByRole('button', { name: 'CSV', exact: true })
  ).toBeVisible();
  await sidebarWidth(page, 250);
  await series.screenshot({
    path: testInfo.outputPath('series-export-light.png')
  });
  await page.theme.setDarkTheme();
  await series.screenshot({
    path: testInfo.outputPath('series-export-dark.png')
  });
  await page.theme.setLightTheme();

  expect(await paletteEnabled(page, 'Export All Runs and Series as CSV')).toBe(
    true
  );
  await runFromPalette(page, 'Export All Runs and Series as CSV');
  const toast = page.locator('.Toastify__toast').filter({ hasText: 'Saved' });
  await expect(toast).toBeVisible({ timeout: 20000 });
  const name = /Saved (\S+\.csv) beside the notebook/.exec(
    (await toast.textContent()) ?? ''
  )![1];
  expect(name).toMatch(/^export-torchdbg-\d{8}-\d{6}\.csv$/);
  // saved beside the notebook: in its folder
  const text: string = await page.evaluate(async file => {
    const app = (window as any).jupyterapp;
    const nb: string = app.shell.currentWidget.context.path;
    const dir = nb.includes('/') ? nb.slice(0, nb.lastIndexOf('/') + 1) : '';
    const model = await app.serviceManager.contents.get(dir + file, {
      type: 'file',
      format: 'text',
      content: true
    });
    return model.content;
  }, name);
  const rows = text.trim().split('\n');
  expect(rows[0]).toBe('kernel,run,series,step,time,value,text');
  const seen = new Set(
    rows.slice(1).map(r => r.split(',').slice(1, 3).join(','))
  );
  for (const run of ['1', '2']) {
    for (const s of ['"loss"', '"acc"', '"grad/opt/total"']) {
      expect(seen).toContain(`${run},${s}`);
    }
  }
  // the panel's CSV button saves the same table (a second file, never over the first)
  await series.getByRole('button', { name: 'CSV', exact: true }).click();
  await expect
    .poll(
      () =>
        page.evaluate(async () => {
          const app = (window as any).jupyterapp;
          const nb: string = app.shell.currentWidget.context.path;
          const dir = nb.includes('/') ? nb.slice(0, nb.lastIndexOf('/')) : '';
          const listing = await app.serviceManager.contents.get(dir);
          return listing.content
            .map((f: { name: string }) => f.name)
            .filter((n: string) => /^export-torchdbg-.*\.csv$/.test(n)).length;
        }),
      { timeout: 20000 }
    )
    .toBe(2);

  // one pandas.read_csv in the notebook reads it
  await setSource(
    page,
    2,
    [
      'import pandas as pd',
      `df = pd.read_csv(${JSON.stringify(name)})`,
      'print(list(df.columns), sorted(df["run"].dropna().astype(int).unique().tolist()), df["value"].dtype, df["step"].dtype)',
      'print(df[(df.run == 2) & (df.series == "acc")].value.tolist()[:2])'
    ].join('\n')
  );
  await page.notebook.runCell(2, true);
  const out = page.locator('.jp-Cell').nth(2).locator('.jp-OutputArea');
  await expect(out).toContainText(
    "['kernel', 'run', 'series', 'step', 'time', 'value', 'text'] [1, 2] float64 float64"
  );
  await expect(out).toContainText('[0.5, 0.5]');
});
