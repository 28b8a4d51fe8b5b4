/**
 * Browser benchmark of the Ranks section with many ranks (#25): a real kernel
 * with `%load_ext jupyterlab_torchdbg` starts 64, then 256 simulated ranks
 * (`jupyterlab_torchdbg.ranks_sim.start`: worker processes sending the real
 * signed messages at the agent's cadence), the panel shown at its default
 * 250 px with the Ranks section open (outliers first, heatmaps). Per world,
 * over a 15 s window once every rank is in the heatmap: main-thread busy
 * fraction and frames per second (pageMetrics.ts), the kernel messages that
 * arrived (`ranks` messages a second, websocket kB a second) and the nodes the
 * panel holds. The simulated workers run on the same machine as the browser
 * (on a 2-core machine they compete with it). Writes
 * `bench-results/browser-ranks.json` (or `$BENCH_RANKS_OUT`) and a screenshot
 * per world. Not a pass/fail test.
 */
import { test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';

import {
  endSimRanks,
  notebookForSimRanks,
  PANEL,
  startSimRanks
} from '../tests/helpers';
import { install, sample, window as between } from './pageMetrics';

test.use({ autoGoto: true });

const WORLDS = [64, 256];
const SETTLE_MS = 3000;
const WINDOW_MS = 15000;
/** Each simulated job's length: attaching, settling, the window, a margin. */
const SECONDS = 45;
const RESULTS = path.join(__dirname, '..', 'bench-results');

test('64 and 256 simulated ranks: main-thread busy and fps', async ({
  page
}) => {
  test.setTimeout(300000);
  const section = await notebookForSimRanks(page, 'bench-ranks.ipynb');
  const cdp = await install(page);

  // the floor: the same page, nothing streaming
  const i0 = await sample(page, cdp);
  await page.waitForTimeout(5000);
  const idle = between(i0, await sample(page, cdp));
  console.log(`bench idle: ${JSON.stringify(idle)}`);

  const worlds: Record<string, unknown> = {};
  for (const world of WORLDS) {
    const scale = await startSimRanks(page, world, SECONDS);
    await page.waitForTimeout(SETTLE_MS);
    const a = await sample(page, cdp);
    await page.waitForTimeout(WINDOW_MS);
    const b = await sample(page, cdp);
    const nodes = await page.evaluate((panel: string) => {
      const root = document.querySelector(panel);
      return {
        page_nodes: document.getElementsByTagName('*').length,
        panel_nodes: root ? root.getElementsByTagName('*').length : 0
      };
    }, PANEL);
    const result = {
      ranks: world,
      ...between(a, b),
      ...nodes,
      rows: await scale.locator('.jp-TorchDbg-rankRow').count(),
      heatmap_cells: await scale.locator('.jp-TorchDbg-rankHeat rect').count()
    };
    console.log(`bench ${world} ranks: ${JSON.stringify(result)}`);
    worlds[String(world)] = result;
    fs.mkdirSync(RESULTS, { recursive: true });
    await page.locator(PANEL).screenshot({
      path: path.join(RESULTS, `bench-ranks-${world}.png`)
    });
    // the job ends (every rank says bye) before the next one
    await endSimRanks(page, section);
  }
  const results = {
    date: new Date().toISOString(),
    viewport: page.viewportSize(),
    seconds: SECONDS,
    idle,
    worlds
  };
  const file =
    process.env.BENCH_RANKS_OUT ?? path.join(RESULTS, 'browser-ranks.json');
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(results, null, 2) + '\n');
});
