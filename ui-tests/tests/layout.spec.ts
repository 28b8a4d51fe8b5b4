/**
 * The panel at JupyterLab's default sidebar width (not resized), light and dark:
 * a real kernel trains a small RNN whose gradients explode; the Now strip shows
 * the step and the loss and stays in sight when the panel scrolls; nothing
 * scrolls sideways; the layer table's numbers do not wrap; the alarm list puts
 * the first alarm first; sections remember being collapsed across a reload; the
 * CSV export is one table; the status bar item sits with JupyterLab's own.
 */
import { expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';

import {
  explodingRnnCell,
  notebookWithPanel,
  openPanel,
  PANEL,
  setSectionOpen,
  setSource,
  sidewaysScroll
} from './helpers';

test.use({ autoGoto: true, kernels: null });

const TRAIN = explodingRnnCell({
  imports: ['from jupyterlab_torchdbg import log'],
  steps: 300,
  beforeLoop: ['crit = nn.MSELoss()'],
  body: [
    'opt.zero_grad()',
    'loss = crit(model(x), y)',
    'log(loss=loss, acc=1.0 / (1.0 + loss.item()))',
    'loss.backward()',
    'opt.step()',
    'time.sleep(0.01)'
  ]
});

/** The scroll areas and tables that must never scroll sideways. */
const NO_SIDEWAYS = [
  '.jp-TorchDbg-sidebar',
  '.jp-TorchDbg-body',
  '.jp-TorchDbg-sectionBody',
  '.jp-TorchDbg-tableWrap',
  '.jp-TorchDbg-now',
  '.jp-TorchDbg-nowRow'
].map(s => (s === '.jp-TorchDbg-sidebar' ? PANEL : `${PANEL} ${s}`));

async function checkFits(
  page: import('@jupyterlab/galata').IJupyterLabPageFixture
) {
  expect.soft(await sidewaysScroll(page, NO_SIDEWAYS)).toEqual([]);
  // the layer table fits its box, and no number cell wraps onto a second line
  const table = await page.evaluate(sel => {
    const wrap = document.querySelector(`${sel} .jp-TorchDbg-tableWrap`)!;
    const t = wrap.querySelector('table')!;
    const cells = [...t.querySelectorAll('tbody td')] as HTMLElement[];
    const line = Math.max(
      ...cells.map(td => parseFloat(getComputedStyle(td).lineHeight) || 16)
    );
    return {
      table: t.scrollWidth,
      wrap: wrap.clientWidth,
      tallest: Math.max(...cells.map(td => td.getBoundingClientRect().height)),
      line,
      wrapped: cells
        .filter(td => td.scrollWidth > td.clientWidth + 1)
        .map(td => td.textContent)
        .filter(t => /\d/.test(t ?? '') && !/[a-z]{3}/i.test(t ?? ''))
    };
  }, PANEL);
  expect.soft(table.table).toBeLessThanOrEqual(table.wrap);
  expect.soft(table.tallest).toBeLessThan(2 * table.line);
  expect.soft(table.wrapped).toEqual([]);
  // "MiB" as written (no uppercase transform anywhere in the memory section)
  const memText = await page
    .locator(`${PANEL} [data-section="memory"]`)
    .innerText();
  expect.soft(memText).toContain('MiB');
  expect.soft(memText).not.toContain('MIB');
}

test('layout at the default sidebar width, light and dark', async ({
  page
}, testInfo) => {
  test.setTimeout(300000);
  await notebookWithPanel(page, 'layout.ipynb');
  const panelWidth = await page.locator(PANEL).evaluate(el => el.clientWidth);
  testInfo.annotations.push({
    type: 'sidebar width',
    description: `${panelWidth} px`
  });
  expect(panelWidth).toBeLessThanOrEqual(300);

  await setSource(page, 0, TRAIN);
  const run = page.notebook.runCell(0, true);
  const now = page.locator(`${PANEL} .jp-TorchDbg-now`);
  // while the cell runs: a step number and the logged loss, by name
  const step = now.locator('.jp-TorchDbg-nowStep .jp-TorchDbg-nowValue');
  await expect(step).toHaveText(/^\d+$/, { timeout: 30000 });
  const loss = now.locator('.jp-TorchDbg-nowLoss');
  await expect(loss.locator('.jp-TorchDbg-nowLabel')).toHaveText('loss');
  await expect(loss.locator('.jp-TorchDbg-nowValue')).not.toHaveText('—');
  await expect(
    now.locator('.jp-TorchDbg-nowGrad .jp-TorchDbg-nowValue')
  ).not.toHaveText('—', { timeout: 20000 });
  await expect(
    now.locator('.jp-TorchDbg-nowMem .jp-TorchDbg-nowValue')
  ).toHaveText(/iB$/, { timeout: 20000 });
  await expect(page.locator('.jp-Cell .jp-InputPrompt').first()).toContainText(
    '*'
  );
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('layout-running-light.png') });
  // no figure is cut by its box, and the loss keeps (part of) its name
  const cut = await now.evaluate(el =>
    [...el.querySelectorAll('.jp-TorchDbg-nowValue, .jp-TorchDbg-nowAlarms')]
      .filter(v => {
        const box = (v.parentElement ?? el).getBoundingClientRect();
        const r = v.getBoundingClientRect();
        return (
          r.right > Math.min(box.right, el.getBoundingClientRect().right) + 0.5
        );
      })
      .map(v => v.textContent)
  );
  expect(cut).toEqual([]);
  expect(
    await loss.locator('.jp-TorchDbg-nowLabel').evaluate(e => e.clientWidth)
  ).toBeGreaterThan(10);
  // two rows at most
  const rows = await now.evaluate(el => {
    const line = parseFloat(getComputedStyle(el).fontSize) * 1.6;
    return el.getBoundingClientRect().height / line;
  });
  expect(rows).toBeLessThan(3);
  await run;

  // logged series come first, then gradients
  const order = await page
    .locator(`${PANEL} .jp-TorchDbg-body > .jp-TorchDbg-section`)
    .evaluateAll(els => els.map(el => el.getAttribute('data-section')));
  expect(order.slice(0, 2)).toEqual(['series', 'grads']);
  expect(order.indexOf('control')).toBeGreaterThan(order.indexOf('grads'));
  expect(order.indexOf('memory')).toBeGreaterThan(order.indexOf('control'));

  // alarms: the count opens the list; the first alarm (root cause) first
  const alarmsButton = now.locator('.jp-TorchDbg-nowAlarms');
  await expect(alarmsButton).toBeEnabled({ timeout: 20000 });
  await setSectionOpen(page, 'grads', false);
  await alarmsButton.click();
  const list = page.locator(
    `${PANEL} [data-section="grads"] .jp-TorchDbg-alerts`
  );
  await expect(list).toBeInViewport();
  const items = list.locator('.jp-TorchDbg-alert');
  expect(await items.count()).toBeGreaterThanOrEqual(2);
  await expect(items.first()).toHaveClass(/jp-mod-first/);
  const steps = await items.evaluateAll(els =>
    els.map(el => Number(el.getAttribute('data-step')))
  );
  expect(steps[0]).toBe(Math.min(...steps));
  await expect(list.locator('.jp-TorchDbg-alert.jp-mod-latest')).toHaveCount(1);
  // click an alarm: its step is marked
  await items.nth(1).locator('.jp-TorchDbg-alertMessage').click();
  await expect(items.nth(1)).toHaveClass(/jp-mod-marked/);

  // the Now strip stays in sight at the bottom of the panel
  await page
    .locator(PANEL)
    .evaluate(el => el.scrollTo({ top: el.scrollHeight }));
  await expect(now).toBeInViewport();
  const [stripTop, panelTop] = await Promise.all([
    now.evaluate(el => el.getBoundingClientRect().top),
    page.locator(PANEL).evaluate(el => el.getBoundingClientRect().top)
  ]);
  expect(Math.abs(stripTop - panelTop)).toBeLessThanOrEqual(1);

  // CSV: one table with one header row
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page
      .locator(`${PANEL} [data-section="grads"] button`, { hasText: 'CSV' })
      .click()
  ]);
  const csv = fs.readFileSync((await download.path())!, 'utf-8');
  const lines = csv.trim().split('\n');
  expect(lines[0]).toBe('run,step,layer,norm');
  expect(lines.filter(l => l.startsWith('run,'))).toHaveLength(1);
  expect(lines.length).toBeGreaterThan(10);
  expect(lines.every(l => l.split(',').length === 4)).toBe(true);

  // a failing cell: the exception view (its failing line must read in both themes)
  await setSource(page, 1, 'model(torch.randn(16, 30, 5))');
  await page.notebook.runCell(1, true);
  await expect(page.locator(`${PANEL} [data-section="exception"]`)).toBeVisible(
    { timeout: 30000 }
  );

  // the status bar item: informative, and centred like JupyterLab's own items
  const status = page.locator('.jp-TorchDbg-status');
  await expect(status).toHaveText(/^Torch: (not training|step \d+)/);
  const [mine, bar] = await Promise.all([
    status.boundingBox(),
    page.locator('#jp-main-statusbar').boundingBox()
  ]);
  expect(
    Math.abs(mine!.y + mine!.height / 2 - (bar!.y + bar!.height / 2))
  ).toBeLessThanOrEqual(2);

  for (const theme of ['light', 'dark'] as const) {
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
      await page.waitForTimeout(800);
    }
    await page.locator(PANEL).evaluate(el => el.scrollTo({ top: 0 }));
    await checkFits(page);
    await page
      .locator(PANEL)
      .screenshot({ path: testInfo.outputPath(`layout-${theme}.png`) });
    await page.locator(`${PANEL} .jp-TorchDbg-nowAlarms`).click();
    await page.waitForTimeout(800); // the smooth scroll
    await page
      .locator(PANEL)
      .screenshot({ path: testInfo.outputPath(`layout-${theme}-alarms.png`) });
    const table = page.locator(`${PANEL} .jp-TorchDbg-layerTable`).first();
    await table.scrollIntoViewIfNeeded();
    await page
      .locator(PANEL)
      .screenshot({ path: testInfo.outputPath(`layout-${theme}-grads.png`) });
    await page
      .locator(`${PANEL} [data-section="memory"]`)
      .scrollIntoViewIfNeeded();
    await page
      .locator(PANEL)
      .screenshot({ path: testInfo.outputPath(`layout-${theme}-memory.png`) });
  }
  await page.theme.setLightTheme();

  // sections remember being collapsed across a page reload
  await setSectionOpen(page, 'memory', false);
  await setSectionOpen(page, 'series', true);
  await page.evaluate(() => window.location.reload());
  await page.waitForSelector('.jp-Notebook', { timeout: 60000 });
  await openPanel(page);
  await expect(page.locator(`${PANEL} .jp-TorchDbg-body`)).toHaveAttribute(
    'data-state',
    'connected',
    { timeout: 60000 }
  );
  await expect(
    page.locator(`${PANEL} [data-section="memory"]`)
  ).toHaveAttribute('data-open', 'false');
  await expect(
    page.locator(`${PANEL} [data-section="series"]`)
  ).toHaveAttribute('data-open', 'true');
  await expect(
    page.locator(`${PANEL} [data-section="memory"] .jp-TorchDbg-sectionBody`)
  ).toHaveCount(0);
});
