/**
 * Exception pop-up in Chromium: a failing cell opens the panel with the right
 * headline; "Go to cell" lands on the line; "Debug" opens a console at the ipdb
 * prompt; exception text from the kernel renders inert (S1).
 */
import { expect, test } from '@jupyterlab/galata';

import { notebookWithPanel, PANEL, setSource } from './helpers';

test.use({ autoGoto: true, kernels: null });

test('device mismatch pops up the panel; go to cell; debug', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'fail.ipynb');
  await setSource(
    page,
    0,
    'import torch\nfrom torch import nn\nmodel = nn.Linear(4, 2, device="meta")\nx = torch.randn(3, 4)'
  );
  await page.notebook.runCell(0, true);
  await setSource(page, 1, 'a = 1\ny = model(x)\nprint(y)');
  // close the panel: the failure must bring it back by itself
  await page.sidebar.close('right');
  await expect(page.locator(PANEL)).toBeHidden();
  await page.notebook.runCell(1, true);
  const exc = page.locator(`${PANEL} .jp-TorchDbg-exception`);
  await expect(exc).toBeVisible({ timeout: 30000 });
  await expect(exc).toHaveAttribute('data-category', 'device_mismatch');
  await expect(exc.locator('.jp-TorchDbg-headline')).toContainText('x');
  await expect(exc.locator('.jp-TorchDbg-headline')).toContainText('meta');
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('exception-light.png') });

  // Go to cell: cell 1 becomes active with the cursor on line 2
  await exc.getByRole('button', { name: 'Go to cell' }).click();
  await expect
    .poll(() =>
      page.evaluate(() => {
        const nb = (window as any).jupyterapp.shell.currentWidget.content;
        return [
          nb.activeCellIndex,
          nb.activeCell.editor.getCursorPosition().line
        ];
      })
    )
    .toEqual([1, 1]);

  // Debug: a console on the same kernel, at the ipdb prompt
  await page
    .locator(`${PANEL} .jp-TorchDbg-exception`)
    .getByRole('button', { name: 'Debug' })
    .click();
  const stdin = page.locator('.jp-CodeConsole .jp-Stdin').first();
  await expect(stdin).toBeVisible({ timeout: 30000 });
  await expect(stdin).toContainText('ipdb>');
  await page.screenshot({ path: testInfo.outputPath('debug-console.png') });
  // the panel says how far up the user's frame is; go there and inspect like %pdb
  const note = page.locator(`${PANEL} .jp-TorchDbg-note`);
  await expect(note).toContainText('type u ');
  const up = /type u (\d+)/.exec((await note.textContent()) ?? '')![1];
  await page.locator('.jp-CodeConsole .jp-Stdin input').last().fill(`u ${up}`);
  await page.keyboard.press('Enter');
  await expect(page.locator('.jp-CodeConsole .jp-Stdin').last()).toContainText(
    'ipdb>'
  );
  await page
    .locator('.jp-CodeConsole .jp-Stdin input')
    .last()
    .fill('p x.shape');
  await page.keyboard.press('Enter');
  await expect(page.locator('.jp-CodeConsole')).toContainText(
    'torch.Size([3, 4])',
    {
      timeout: 20000
    }
  );
  await page.locator('.jp-CodeConsole .jp-Stdin input').last().fill('q');
  await page.keyboard.press('Enter');
});

test('S1: exception strings from the kernel render as text', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'xss-exc.ipynb');
  const evil =
    '<img src=x onerror="window.__xss=1"> </script><script>window.__xss=2</script> javascript:alert(1) \u202eRTL';
  await setSource(
    page,
    0,
    `evil = ${JSON.stringify(evil)}\nclass Boom(Exception):\n    pass\nraise Boom(evil)`
  );
  await page.notebook.runCell(0, true);
  const exc = page.locator(`${PANEL} .jp-TorchDbg-exception`);
  await expect(exc).toBeVisible({ timeout: 30000 });
  await expect(exc.locator('.jp-TorchDbg-excMessage')).toContainText(
    '<img src=x onerror='
  );
  const injected = await page.evaluate(() => ({
    xss: (window as any).__xss ?? null,
    imgs: document.querySelectorAll('#jp-torchdbg-sidebar img').length,
    scripts: document.querySelectorAll('#jp-torchdbg-sidebar script').length
  }));
  expect(injected).toEqual({ xss: null, imgs: 0, scripts: 0 });
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('exception-xss.png') });
});

test('a DataLoader worker’s error shows the original error, the dataset frame and the index', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'loader.ipynb');
  await setSource(
    page,
    0,
    [
      'import torch',
      'from torch.utils.data import Dataset, DataLoader',
      'class Samples(Dataset):',
      '    def __len__(self):',
      '        return 16',
      '    def __getitem__(self, i):',
      '        if i == 7:',
      '            raise ValueError(f"sample {i} is corrupt")',
      '        return torch.full((3,), float(i))'
    ].join('\n')
  );
  await page.notebook.runCell(0, true);
  await setSource(
    page,
    1,
    'for batch in DataLoader(Samples(), batch_size=4, num_workers=2):\n    pass'
  );
  await page.notebook.runCell(1, true);
  const exc = page.locator(`${PANEL} .jp-TorchDbg-exception`);
  await expect(exc).toBeVisible({ timeout: 60000 });
  await expect(exc).toHaveAttribute('data-category', 'data_loader');
  await expect(exc.locator('.jp-TorchDbg-headline')).toContainText(
    'ValueError: sample 7 is corrupt'
  );
  await expect(exc.locator('.jp-TorchDbg-headline')).toContainText(
    'sample index 7'
  );
  await expect(exc.locator('.jp-TorchDbg-excOrigin')).toHaveText(
    'in DataLoader worker process 1 · sample index 7 · batch (4, 5, 6, 7)'
  );
  await expect(exc.locator('.jp-TorchDbg-excMessage').first()).toHaveText(
    'ValueError: sample 7 is corrupt'
  );
  await expect(exc.locator('.jp-TorchDbg-frameProcess')).toHaveText(
    'in DataLoader worker process 1 (from its traceback text):'
  );
  // the dataset's frame is selected: its source and the note in place of locals
  await expect(exc.locator('.jp-TorchDbg-frameProcessNote')).toBeVisible();
  await expect(
    exc.locator('.jp-TorchDbg-source .jp-mod-current')
  ).toContainText('raise ValueError');
  for (const theme of ['light', 'dark']) {
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
    }
    await page
      .locator(PANEL)
      .screenshot({ path: testInfo.outputPath(`loader-error-${theme}.png`) });
  }
  await page.theme.setLightTheme();
  // Go to cell: the dataset's cell (0), on the line that raised (8)
  await exc.getByRole('button', { name: 'Go to cell' }).click();
  await expect
    .poll(() =>
      page.evaluate(() => {
        const nb = (window as any).jupyterapp.shell.currentWidget.content;
        return [
          nb.activeCellIndex,
          nb.activeCell.editor.getCursorPosition().line
        ];
      })
    )
    .toEqual([0, 7]);
});
