/**
 * Hundreds of ranks (#25), in Chromium with a real kernel: after
 * `%load_ext jupyterlab_torchdbg` a cell starts simulated ranks
 * (`jupyterlab_torchdbg.ranks_sim.start`: worker processes that connect to
 * this kernel's endpoint and send the real signed messages at the agent's
 * cadence; rank 137 % world steps 6x slower, rank 200 % world has an 8x
 * gradient norm). With 64 then 256 ranks the Ranks section shows, instead of
 * a row per rank, the outliers first (the slow and the high-norm rank named in
 * the first two rows) and heatmaps of step time and gradient norm with a cell
 * per rank and its tooltip; the rows in the DOM stay a handful. Nothing
 * scrolls sideways at the default 250 px sidebar; screenshots light and dark.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  endSimRanks,
  notebookForSimRanks,
  PANEL,
  sidewaysScroll,
  startSimRanks
} from './helpers';

test.use({ autoGoto: true, kernels: null });

/** The scroll areas that must never scroll sideways. */
const NO_SIDEWAYS = [
  PANEL,
  `${PANEL} .jp-TorchDbg-body`,
  `${PANEL} [data-section="ranks"] .jp-TorchDbg-sectionBody`,
  `${PANEL} .jp-TorchDbg-rankScale`,
  `${PANEL} .jp-TorchDbg-rankGrid`,
  `${PANEL} .jp-TorchDbg-rankRow`,
  `${PANEL} .jp-TorchDbg-rankHeat`
];

test('64 then 256 simulated ranks: outliers first and a heatmap cell per rank', async ({
  page
}, testInfo) => {
  test.setTimeout(300000);
  const section = await notebookForSimRanks(page, 'ranks-scale.ipynb');
  await expect(section).toHaveCount(0);

  for (const [world, slow, high, seconds] of [
    [64, 137 % 64, 200 % 64, 30],
    [256, 137, 200, 45]
  ]) {
    // every rank attached (startSimRanks waits for it), a heatmap cell each, in both
    const scale = await startSimRanks(page, world, seconds);
    for (const metric of ['time', 'norm']) {
      await expect(
        scale.locator(`.jp-TorchDbg-rankHeat[data-metric="${metric}"] rect`)
      ).toHaveCount(world);
    }
    // the slow rank and the high-norm rank are the first two outliers
    const rows = scale.locator('.jp-TorchDbg-rankRow');
    const firstTwo = async () => {
      const n = await rows.count();
      const ranks: number[] = [];
      for (let i = 0; i < Math.min(n, 2); i++) {
        ranks.push(Number(await rows.nth(i).getAttribute('data-rank')));
      }
      return ranks.sort((a, b) => a - b);
    };
    await expect
      .poll(firstTwo, { timeout: 60000 })
      .toEqual([slow, high].sort((a, b) => a - b));
    // a handful of rows, never a row per rank
    expect(await rows.count()).toBeLessThanOrEqual(6);
    expect(
      await section.locator('.jp-TorchDbg-rankRow').count()
    ).toBeLessThanOrEqual(6);
    // the slow rank's cell: the hottest step time, and its tooltip
    const slowCell = scale.locator(
      `.jp-TorchDbg-rankHeat[data-metric="time"] rect[data-rank="${slow}"]`
    );
    await expect(slowCell).toHaveClass(/jp-mod-level4/, { timeout: 30000 });
    await expect(slowCell.locator('title')).toHaveText(
      new RegExp(`^rank ${slow}: [0-9.]+ ms/step, norm `)
    );
    const highCell = scale.locator(
      `.jp-TorchDbg-rankHeat[data-metric="norm"] rect[data-rank="${high}"]`
    );
    await expect(highCell).toHaveClass(/jp-mod-level4/, { timeout: 30000 });

    // at the default sidebar width nothing scrolls sideways; light and dark
    expect.soft(await sidewaysScroll(page, NO_SIDEWAYS)).toEqual([]);
    await section.scrollIntoViewIfNeeded();
    await page
      .locator(PANEL)
      .screenshot({ path: testInfo.outputPath(`ranks-${world}-light.png`) });
    await section.screenshot({
      path: testInfo.outputPath(`ranks-${world}-section-light.png`)
    });
    await page.theme.setDarkTheme();
    await page.waitForTimeout(500);
    expect.soft(await sidewaysScroll(page, NO_SIDEWAYS)).toEqual([]);
    await section.scrollIntoViewIfNeeded();
    await page
      .locator(PANEL)
      .screenshot({ path: testInfo.outputPath(`ranks-${world}-dark.png`) });
    await section.screenshot({
      path: testInfo.outputPath(`ranks-${world}-section-dark.png`)
    });
    await page.theme.setLightTheme();

    // the simulated job ends (every rank says bye) before the next one
    await endSimRanks(page, section);
  }
});
