/**
 * Runs kept apart, in Chromium with a real kernel: one training cell that logs
 * `loss`, run twice. The first run explodes (alarms), the second trains at a
 * small learning rate. The panel shows run 2 with its own step numbering from
 * 1 (not 41..80 strung after run 1), its own track and no alarm; run 1 is drawn
 * only as a faded overlay when the toggle is on, and comes back whole (its
 * alarms with it) when picked. Screenshots at the default width, light and dark.
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

const STEPS = 40;

const TRAIN = explodingRnnCell({
  imports: ['from jupyterlab_torchdbg import log'],
  steps: STEPS,
  afterOptimizer: ['for g in opt.param_groups:', '    g["lr"] = LR'],
  body: [
    'opt.zero_grad()',
    'loss = nn.functional.mse_loss(model(x), y)',
    'loss.backward()',
    'opt.step()',
    'log(loss=loss.item())',
    'time.sleep(0.02)'
  ]
});

test('a re-run cell is a new run: own steps, own alarms, the old one faded on demand', async ({
  page
}, testInfo) => {
  test.setTimeout(240000);
  await notebookWithPanel(page, 'runs.ipynb');
  const bar = page.locator(`${PANEL} .jp-TorchDbg-runs`);
  const picker = bar.locator('select.jp-TorchDbg-runPick');
  const grads = page.locator(`${PANEL} [data-section="grads"]`);
  const badge = grads.locator('.jp-TorchDbg-badge');
  const lossCard = page.locator(
    `${PANEL} .jp-TorchDbg-seriesCard[data-series="loss"]`
  );
  // no run before anything trained: no picker
  await expect(bar).toHaveCount(0);

  // run 1: lr 0.5, the RNN's gradients explode
  await setSource(page, 0, 'LR = 0.5');
  await setSource(page, 1, TRAIN);
  await page.notebook.runCell(0, true);
  await page.notebook.runCell(1, true);
  await setSectionOpen(page, 'series', true);
  await setSectionOpen(page, 'grads', true);
  await expect(lossCard.locator('.jp-TorchDbg-seriesFooter')).toContainText(
    `step ${STEPS} · ${STEPS} points`
  );
  await expect(badge).toHaveText(/^[1-9]\d*$/);
  const run1Alarms = Number(await badge.textContent());
  await expect(picker.locator('option:checked')).toHaveText(
    new RegExp(`^Run 1 · In\\[\\d+\\] · ${STEPS} steps`)
  );
  // the alarms in the title (the line itself fits a 250 px sidebar)
  await expect(picker).toHaveAttribute(
    'title',
    new RegExp(
      `^Run 1 · In\\[\\d+\\] · ${STEPS} steps · ${run1Alarms} alarms?$`
    )
  );

  // run 2: the same cell again at lr 0.001
  await setSource(page, 0, 'LR = 0.001');
  await page.notebook.runCell(0, true);
  await page.notebook.runCell(1, true);
  await expect(bar).toHaveAttribute('data-shown', '2');
  await expect(picker.locator('option:checked')).toHaveText(
    new RegExp(`^Run 2 · In\\[\\d+\\] · ${STEPS} steps`)
  );
  // its own step numbering: 40 points at steps 1..40, not 80 strung together
  await expect(lossCard.locator('.jp-TorchDbg-seriesFooter')).toContainText(
    `step ${STEPS} · ${STEPS} points`
  );
  // one track, run 2's: it replaced run 1's (not listed below it)
  await expect(grads.locator('.jp-TorchDbg-track')).toHaveCount(1);
  await expect(grads.locator('.jp-TorchDbg-trackMeta')).toContainText(
    `step ${STEPS} ·`
  );
  // alarm counts per run: none in run 2, run 1 keeps its own
  await expect(badge).toHaveCount(0);
  await expect(grads.locator('.jp-TorchDbg-alert')).toHaveCount(0);
  await expect(picker.locator('option[value="1"]')).toHaveAttribute(
    'title',
    new RegExp(` · ${run1Alarms} alarms?$`)
  );

  // run 1 only as a faded overlay, and only when toggled
  const chart = lossCard.locator('.jp-TorchDbg-chartHost');
  await page.waitForTimeout(500); // the last frame drawn
  const plain = await chart.screenshot();
  const faded = bar.getByRole('checkbox', { name: 'earlier runs faded' });
  await faded.check();
  await expect
    .poll(async () => (await chart.screenshot()).equals(plain), {
      timeout: 10000
    })
    .toBe(false);
  await expect(lossCard.locator('.jp-TorchDbg-seriesFooter')).toContainText(
    `step ${STEPS} · ${STEPS} points`
  );
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('runs-light.png') });
  await page.theme.setDarkTheme();
  await page.waitForTimeout(500);
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('runs-dark.png') });
  await page.theme.setLightTheme();
  await faded.uncheck();
  await expect
    .poll(async () => (await chart.screenshot()).equals(plain), {
      timeout: 10000
    })
    .toBe(true);

  // pick run 1: its series, track and alarms come back
  await picker.selectOption('1');
  await expect(bar).toHaveAttribute('data-shown', '1');
  await expect(badge).toHaveText(String(run1Alarms));
  await expect(grads.locator('.jp-TorchDbg-alert').first()).toBeVisible();
  await expect(lossCard.locator('.jp-TorchDbg-seriesFooter')).toContainText(
    `step ${STEPS} · ${STEPS} points`
  );
  // compare: run 2 drawn over run 1
  const compare = bar.locator('select.jp-TorchDbg-runCompare');
  const beforeCompare = await chart.screenshot();
  await compare.selectOption('2');
  await expect
    .poll(async () => (await chart.screenshot()).equals(beforeCompare), {
      timeout: 10000
    })
    .toBe(false);
  // back to the current (last) run
  await picker.selectOption('2');
  await expect(bar).toHaveAttribute('data-shown', '2');
  await expect(badge).toHaveCount(0);
});
