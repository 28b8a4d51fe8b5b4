/**
 * The foundation, end to end in Chromium: palette command, live chart from a
 * running cell, reattach after a kernel restart, kernel strings rendered inert.
 */
import {
  expect,
  galata,
  IJupyterLabPageFixture,
  test
} from '@jupyterlab/galata';

import { openPanel, PANEL, setSource } from './helpers';

async function openPanelFromPalette(page: IJupyterLabPageFixture) {
  await page.keyboard.press('Control+Shift+C');
  const palette = page.locator('#modal-command-palette');
  await expect(palette).toBeVisible();
  await palette.locator('input').fill('Torch Debugger Open Panel');
  await palette
    .locator('.lm-CommandPalette-item', { hasText: 'Open Panel' })
    .first()
    .click();
  await expect(page.locator(PANEL)).toBeVisible();
}

async function newNotebook(page: IJupyterLabPageFixture, name: string) {
  await page.notebook.createNew(name);
  await page.notebook.setCell(0, 'code', '1');
}

// Galata's kernel-tracking mock answers the restart request with 201, which
// JupyterLab rejects ("Invalid response: 201 Created"): talk to the real API.
test.use({ autoGoto: true, kernels: null });

test.describe('foundation', () => {
  test('palette opens the panel, which says why it is empty', async ({
    page
  }) => {
    await openPanelFromPalette(page);
    await expect(page.locator(PANEL)).toContainText(
      'Open a notebook or console with a Python kernel'
    );
  });

  test('keyboard shortcut opens the panel', async ({ page }) => {
    await page.keyboard.press('Control+Shift+Y');
    await expect(page.locator(PANEL)).toBeVisible();
  });

  test('live loss curve while the cell runs, then reattach after restart', async ({
    page
  }, testInfo) => {
    await newNotebook(page, 'live.ipynb');
    await openPanelFromPalette(page);
    // autoLoad: the panel loads the kernel side by itself
    await expect(page.locator(`${PANEL} .jp-TorchDbg-body`)).toHaveAttribute(
      'data-state',
      'connected',
      { timeout: 60000 }
    );
    await expect(page.locator(PANEL)).toContainText('Nothing logged yet');
    await page.screenshot({
      path: testInfo.outputPath('panel-connected-empty.png')
    });

    await setSource(
      page,
      0,
      [
        'import math, time',
        'from jupyterlab_torchdbg import log',
        'for step in range(2000): log(loss=2.0 * math.exp(-step / 400) + 0.05 * math.sin(step / 7), lr=1e-3); time.sleep(0.003)'
      ].join('\n')
    );
    const run = page.notebook.runCell(0, true);

    const card = page.locator(
      `${PANEL} .jp-TorchDbg-seriesCard[data-series="loss"]`
    );
    await expect(card).toBeVisible({ timeout: 30000 });
    const points = async () => {
      const text =
        (await card.locator('.jp-TorchDbg-seriesFooter').textContent()) ?? '';
      return Number(/([\d]+) points/.exec(text)?.[1] ?? '0');
    };
    // the chart updates while the cell is still running
    await expect.poll(points, { timeout: 20000 }).toBeGreaterThan(100);
    const first = await points();
    await expect.poll(points, { timeout: 20000 }).toBeGreaterThan(first + 100);
    const prompt = page.locator('.jp-Cell .jp-InputPrompt').first();
    await expect(prompt).toContainText('*'); // still running
    await expect(card.locator('canvas').first()).toBeVisible();
    await page.locator(PANEL).screenshot({
      path: testInfo.outputPath('panel-live-light.png')
    });
    await run;
    await expect.poll(points, { timeout: 20000 }).toBe(2000);
    await page.locator(PANEL).screenshot({
      path: testInfo.outputPath('panel-done-light.png')
    });

    // dark theme
    await page.theme.setDarkTheme();
    await page.waitForTimeout(500);
    await page.locator(PANEL).screenshot({
      path: testInfo.outputPath('panel-done-dark.png')
    });
    await page.theme.setLightTheme();

    // restart the kernel: the panel says so, then reattaches (autoLoad again)
    await page.menu.clickMenuItem('Kernel>Restart Kernel…');
    await page.locator('.jp-Dialog .jp-mod-accept').click();
    await expect(
      page.locator(`${PANEL} .jp-TorchDbg-body`)
    ).not.toHaveAttribute('data-state', 'connected', { timeout: 10000 });
    await expect(page.locator(`${PANEL} .jp-TorchDbg-body`)).toHaveAttribute(
      'data-state',
      'connected',
      { timeout: 60000 }
    );
    // history belonged to the old kernel
    await expect(page.locator(PANEL)).toContainText('Nothing logged yet');
    await setSource(
      page,
      0,
      'from jupyterlab_torchdbg import log\nfor i in range(5): log(after_restart=i)'
    );
    await page.notebook.runCell(0, true);
    await expect(
      page.locator(
        `${PANEL} .jp-TorchDbg-seriesCard[data-series="after_restart"]`
      )
    ).toBeVisible();

    // page reload: the panel reattaches and gets the history in one snapshot (R04, R06)
    // (a plain browser reload: Galata's page.reload waits for a launcher tab)
    await page.evaluate(() => window.location.reload());
    await page.waitForSelector('.jp-Notebook', { timeout: 60000 });
    await openPanel(page);
    await expect(page.locator(`${PANEL} .jp-TorchDbg-body`)).toHaveAttribute(
      'data-state',
      'connected',
      { timeout: 60000 }
    );
    // the whole history came back in one snapshot (5 points; log() counts
    // steps from 1 in each run, so the last is step 5)
    await expect(
      page.locator(
        `${PANEL} .jp-TorchDbg-seriesCard[data-series="after_restart"] .jp-TorchDbg-seriesFooter`
      )
    ).toHaveText('step 5 · 5 points', { timeout: 30000 });
    // the stream continues from the snapshot without a sequence gap
    await expect(page.locator(`${PANEL} .jp-TorchDbg-footer`)).toContainText(
      '0 gaps'
    );
  });

  test('S1: kernel strings as series names render as inert text', async ({
    page
  }, testInfo) => {
    await newNotebook(page, 'xss.ipynb');
    await openPanelFromPalette(page);
    await expect(page.locator(`${PANEL} .jp-TorchDbg-body`)).toHaveAttribute(
      'data-state',
      'connected',
      { timeout: 60000 }
    );
    const names = [
      '<img src=x onerror="window.__xss=1">',
      '</script><script>window.__xss=2</script>',
      'javascript:window.__xss=3',
      '<a data-commandlinker-command="notebook:run-all-cells">run</a>',
      '<div id="jp-torchdbg-sidebar">clobber</div>',
      '\u202eevil\u202c.py',
      '<b>bold</b>'
    ];
    await setSource(
      page,
      0,
      `from jupyterlab_torchdbg import log\nnames = ${JSON.stringify(names)}\nfor i in range(3): log(**{n: float(i) for n in names})`
    );
    await page.notebook.runCell(0, true);
    const cards = page.locator(`${PANEL} .jp-TorchDbg-seriesCard`);
    await expect(cards).toHaveCount(names.length);
    for (const name of names) {
      await expect(
        page
          .locator(`${PANEL} .jp-TorchDbg-seriesName`)
          .filter({ hasText: name })
      ).toHaveCount(1);
    }
    const injected = await page.evaluate(() => ({
      xss: (window as any).__xss ?? null,
      imgs: document.querySelectorAll('#jp-torchdbg-sidebar img').length,
      scripts: document.querySelectorAll('#jp-torchdbg-sidebar script').length,
      links: document.querySelectorAll(
        '#jp-torchdbg-sidebar a, #jp-torchdbg-sidebar [data-commandlinker-command]'
      ).length,
      bold: document.querySelectorAll('#jp-torchdbg-sidebar b').length,
      sidebars: document.querySelectorAll('#jp-torchdbg-sidebar').length
    }));
    expect(injected).toEqual({
      xss: null,
      imgs: 0,
      scripts: 0,
      links: 0,
      bold: 0,
      sidebars: 1
    });
    await page
      .locator(PANEL)
      .screenshot({ path: testInfo.outputPath('panel-xss.png') });
  });
});

void galata;
