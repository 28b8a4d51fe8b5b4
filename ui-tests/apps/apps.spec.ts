/**
 * The panel in the apps and versions people run (issue #26), in Chromium with a real
 * kernel: Jupyter Notebook 7's notebook page (`playwright.notebook7.config.js`, in CI)
 * and the oldest supported JupyterLab (`playwright.lab-oldest.config.js`, run by
 * `scripts/version-ends.sh ui-oldest` against JupyterLab 4.4.0), the same labextension
 * in both; the config's `app` option says which. The sidebar opens
 * from the command palette; a training cell's step and loss move live in it; a failing
 * cell pops the panel up on its exception (the panel closed first) and "Go to cell" puts
 * the cursor on the line that raised. Screenshots light and dark.
 *
 * Plain Playwright (Galata's fixtures drive JupyterLab's page): the notebook is written
 * through the server's contents API and driven through the page.
 */
import { expect, Page, test as base } from '@playwright/test';

/** Which app's page the notebook opens in: its URL and its name in the test. */
const APPS = {
  notebook7: {
    path: 'notebooks',
    name: 'Notebook 7',
    palette: '.lm-CommandPalette'
  },
  // (JupyterLab also has a palette in its left sidebar: the modal one)
  lab: {
    path: 'lab/tree',
    name: 'JupyterLab',
    palette: '#modal-command-palette'
  }
};

const test = base.extend<{ app: keyof typeof APPS }>({
  app: ['notebook7', { option: true }]
});

const PANEL = '#jp-torchdbg-sidebar';

const CELLS = [
  [
    '%load_ext jupyterlab_torchdbg',
    'import time, torch',
    'from torch import nn',
    'from jupyterlab_torchdbg import log'
  ],
  [
    'torch.manual_seed(0)',
    'model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))',
    'opt = torch.optim.SGD(model.parameters(), lr=0.05)',
    'x, y = torch.randn(64, 8), torch.randn(64, 1)',
    'for step in range(300):',
    '    loss = nn.functional.mse_loss(model(x), y)',
    '    opt.zero_grad()',
    '    loss.backward()',
    '    opt.step()',
    '    log(loss=loss)',
    '    time.sleep(0.02)'
  ],
  ['a = 1', 'y = nn.Linear(4, 2, device="meta")(torch.randn(3, 4))', 'print(y)']
];

function notebook(): object {
  return {
    type: 'notebook',
    content: {
      cells: CELLS.map(lines => ({
        cell_type: 'code',
        source: lines.join('\n'),
        metadata: {},
        outputs: [],
        execution_count: null
      })),
      metadata: {
        kernelspec: {
          name: 'python3',
          display_name: 'Python 3 (ipykernel)',
          language: 'python'
        }
      },
      nbformat: 4,
      nbformat_minor: 5
    }
  };
}

/** Run cell `i` (select it, Shift+Enter) without waiting for it to end. */
async function runCell(page: Page, i: number): Promise<void> {
  await page
    .locator('.jp-Notebook .jp-Cell')
    .nth(i)
    .locator('.jp-InputPrompt')
    .click();
  await page.keyboard.press('Shift+Enter');
}

/** Run a command from the command palette (Ctrl+Shift+C, in both apps). */
async function paletteRun(
  page: Page,
  selector: string,
  label: string,
  query = label
): Promise<void> {
  const palette = page.locator(selector);
  // A key press while the app still settles focus can be lost, and the modal
  // palette closes when the page takes the focus back (a notebook whose kernel
  // just started): open, search and click again until the click lands.
  await expect(async () => {
    await page.keyboard.press('Escape');
    await page.keyboard.press('Control+Shift+C');
    await expect(palette).toBeVisible({ timeout: 2000 });
    await palette.locator('input').fill(query, { timeout: 2000 });
    await palette
      .locator('.lm-CommandPalette-item', { hasText: label })
      .first()
      .click({ timeout: 2000 });
  }).toPass({ timeout: 60000 });
}

async function prompt(page: Page, i: number): Promise<string> {
  return (
    (await page
      .locator('.jp-Notebook .jp-Cell')
      .nth(i)
      .locator('.jp-InputPrompt')
      .textContent()) ?? ''
  ).trim();
}

test('the sidebar from the palette, live figures, the pop-up and Go to cell', async ({
  page,
  request,
  app
}, testInfo) => {
  test.setTimeout(240000);
  testInfo.annotations.push({ type: 'app', description: APPS[app].name });
  const name = `${app}-${testInfo.retry}.ipynb`;
  expect(
    (await request.put(`/api/contents/${name}`, { data: notebook() })).ok()
  ).toBe(true);
  await page.goto(`/${APPS[app].path}/${name}`);
  await expect(page.locator('.jp-Notebook .jp-Cell')).toHaveCount(3, {
    timeout: 60000
  });
  await expect(
    page.locator('.jp-Notebook-ExecutionIndicator, .jp-KernelStatus').first()
  )
    .toBeVisible({ timeout: 60000 })
    .catch(() => undefined);

  // the palette (Ctrl+Shift+C, as in JupyterLab): Torch Debugger's "Open Panel"
  await expect(page.locator(PANEL)).toBeHidden();
  await page.locator('.jp-Notebook').click();
  await paletteRun(
    page,
    APPS[app].palette,
    'Open Panel',
    'Torch Debugger Open Panel'
  );
  const panel = page.locator(PANEL);
  await expect(panel).toBeVisible();

  // training: the step and the loss move in the panel while the cell runs
  await runCell(page, 0);
  await expect.poll(() => prompt(page, 0), { timeout: 90000 }).toBe('[1]:');
  await runCell(page, 1);
  const step = panel.locator('.jp-TorchDbg-nowStep .jp-TorchDbg-nowValue');
  const stepNow = async () =>
    Number(((await step.textContent()) ?? '').replace(/\D/g, '') || 0);
  await expect.poll(stepNow, { timeout: 60000 }).toBeGreaterThan(5);
  const first = await stepNow();
  await expect.poll(stepNow, { timeout: 30000 }).toBeGreaterThan(first);
  const loss = panel.locator('.jp-TorchDbg-nowLoss .jp-TorchDbg-nowValue');
  await expect(loss).toHaveText(/\d/);
  await expect.poll(() => prompt(page, 1), { timeout: 120000 }).toBe('[2]:');
  // the loss series holds every step of the run
  await expect(panel).toContainText('step 300 · 300 points', {
    timeout: 30000
  });
  await panel.screenshot({ path: testInfo.outputPath(`${app}-light.png`) });

  // the pop-up: the panel closed, a failing cell brings it back on the exception
  await page.keyboard.press('Escape');
  await page.keyboard.press('Control+Shift+Y'); // Toggle Panel
  await expect(panel).toBeHidden();
  await runCell(page, 2);
  const exc = panel.locator('.jp-TorchDbg-exception');
  await expect(exc).toBeVisible({ timeout: 60000 });
  await expect(exc).toHaveAttribute('data-category', 'device_mismatch');
  await expect(exc.locator('.jp-TorchDbg-headline')).toContainText('meta');

  // Go to cell: the failing cell is active, the cursor on the line that raised
  await page
    .locator('.jp-Notebook .jp-Cell')
    .nth(0)
    .locator('.jp-InputPrompt')
    .click();
  await exc.getByRole('button', { name: 'Go to cell' }).click();
  const active = page.locator('.jp-Notebook .jp-Cell.jp-mod-active');
  await expect(active).toHaveCount(1);
  expect(
    await page
      .locator('.jp-Notebook .jp-Cell')
      .evaluateAll(cells =>
        cells.findIndex(c => c.classList.contains('jp-mod-active'))
      )
  ).toBe(2);
  // the cursor is in that cell's editor, on the line that raised: what is typed
  // lands at the start of line 2
  await page.keyboard.type('#');
  await expect(active.locator('.cm-line').nth(1)).toHaveText(
    '#y = nn.Linear(4, 2, device="meta")(torch.randn(3, 4))'
  );
  await expect(active.locator('.cm-line').nth(0)).toHaveText('a = 1');

  await panel.screenshot({
    path: testInfo.outputPath(`${app}-exception-light.png`)
  });
  await paletteRun(page, APPS[app].palette, 'Use Theme: JupyterLab Dark');
  await expect(page.locator('body')).toHaveAttribute(
    'data-jp-theme-light',
    'false'
  );
  await page.waitForTimeout(500);
  await panel.screenshot({
    path: testInfo.outputPath(`${app}-exception-dark.png`)
  });
  await paletteRun(page, APPS[app].palette, 'Use Theme: JupyterLab Light');
});
