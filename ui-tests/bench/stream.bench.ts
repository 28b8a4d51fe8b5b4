/**
 * Browser benchmark: the panel while a kernel streams 400 `log()` series at
 * 250 steps/s for 15 s, once with the panel visible and once hidden (another
 * right sidebar tab shown). Main-thread busy fraction from the Chrome DevTools
 * Protocol (`Performance.getMetrics`: TaskDuration and ScriptDuration deltas
 * over wall time) and frames per second from a requestAnimationFrame counter.
 * Writes `bench-results/browser.json` (or `$BENCH_OUT`). Not a pass/fail test.
 */
import { expect, test } from '@jupyterlab/galata';
import type { CDPSession } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

import { notebookWithPanel, PANEL, setSource } from '../tests/helpers';

test.use({ autoGoto: true });

const SERIES = 400;
const RATE = 250;
const SECONDS = 15;
/** Measured window inside each stream: after start-up, before the end. */
const SETTLE_MS = 3000;
const WINDOW_MS = 10000;

const CELL = [
  'import math, time',
  'from jupyterlab_torchdbg import log',
  `names = [f"bench/s{i:03d}" for i in range(${SERIES})]`,
  'rows = [{n: math.sin(k / 8 + i) + 1.5 for i, n in enumerate(names)} for k in range(64)]',
  'step = 0',
  't0 = time.perf_counter()',
  'while True:',
  '    now = time.perf_counter()',
  `    if now - t0 >= ${SECONDS}:`,
  '        break',
  `    ahead = t0 + step / ${RATE} - now`,
  '    if ahead > 0:',
  '        time.sleep(ahead)',
  '        continue',
  '    log(step, **rows[step % 64])',
  '    step += 1',
  'print(f"BENCH steps={step} rate={step / (time.perf_counter() - t0):.1f}")'
].join('\n');

interface IMetrics {
  durations: Record<string, number>;
  task: number;
  script: number;
  layout: number;
  frames: number;
  wall: number;
}

async function sample(page: any, cdp: CDPSession): Promise<IMetrics> {
  const { metrics } = await cdp.send('Performance.getMetrics');
  const get = (name: string) =>
    metrics.find((m: { name: string }) => m.name === name)?.value ?? 0;
  const frames = await page.evaluate(() => (window as any).__benchFrames);
  const durations: Record<string, number> = {};
  for (const m of metrics as { name: string; value: number }[]) {
    if (m.name.endsWith('Duration')) {
      durations[m.name] = m.value;
    }
  }
  return {
    durations,
    task: get('TaskDuration'),
    script: get('ScriptDuration'),
    layout: get('LayoutDuration') + get('RecalcStyleDuration'),
    frames,
    wall: Date.now() / 1000
  };
}

const RESULTS = path.join(__dirname, '..', 'bench-results');

/** Points the first benchmark card's footer shows (-1: not shown, e.g. hidden). */
async function points(page: any): Promise<number> {
  const footer = page.locator(
    `${PANEL} .jp-TorchDbg-seriesCard[data-series="bench/s000"] .jp-TorchDbg-seriesFooter`
  );
  if (!(await footer.isVisible())) {
    return -1;
  }
  const text = (await footer.textContent()) ?? '';
  return Number(/([\d]+) points/.exec(text)?.[1] ?? '-1');
}

/** Run the streaming cell and measure a window in the middle of it. */
async function measure(page: any, cdp: CDPSession, label: string) {
  // run without galata's wait for the status bar's "Idle" (ours says "idle" too)
  // (not awaited in the page: the command resolves when the cell has run)
  await page.evaluate(() => {
    const app = (window as any).jupyterapp;
    app.shell.currentWidget.content.activeCellIndex = 0;
    void app.commands.execute('notebook:run-cell');
  });
  await page.waitForTimeout(SETTLE_MS);
  // BENCH_TRACE=1: a Chrome trace of the visible window (where the time goes)
  const trace = !!process.env.BENCH_TRACE && label === 'visible';
  if (trace) {
    await page
      .context()
      .browser()!
      .startTracing(undefined, {
        path: path.join(RESULTS, 'trace-visible.json'),
        categories: [
          'devtools.timeline',
          'disabled-by-default-devtools.timeline'
        ]
      });
  }
  const a = await sample(page, cdp);
  const pa = await points(page);
  await page.waitForTimeout(WINDOW_MS / 2);
  if (label === 'visible') {
    await page.locator(PANEL).screenshot({
      path: path.join(RESULTS, 'bench-panel-visible.png')
    });
  }
  await page.waitForTimeout(WINDOW_MS / 2);
  const b = await sample(page, cdp);
  const pb = await points(page);
  if (trace) {
    await page.context().browser()!.stopTracing();
  }
  const output = async () =>
    (await page.notebook.getCellTextOutput(0))?.join('') ?? '';
  await expect.poll(output, { timeout: 60000 }).toMatch(/BENCH steps=\d+/);
  const out = await output();
  const m = /BENCH steps=(\d+) rate=([\d.]+)/.exec(out);
  const wall = b.wall - a.wall;
  const result = {
    panel: label,
    window_s: Number(wall.toFixed(2)),
    busy_fraction: Number(((b.task - a.task) / wall).toFixed(4)),
    script_fraction: Number(((b.script - a.script) / wall).toFixed(4)),
    style_layout_fraction: Number(((b.layout - a.layout) / wall).toFixed(4)),
    fps: Number(((b.frames - a.frames) / wall).toFixed(1)),
    // the first card's point count, read from the model (the panel kept up?)
    points_per_s_first_series:
      pa < 0 || pb < 0 ? null : Math.round((pb - pa) / wall),
    // every *Duration metric as a fraction of wall time (where the busy time goes)
    fractions: Object.fromEntries(
      Object.keys(b.durations).map(k => [
        k,
        Number(((b.durations[k] - (a.durations[k] ?? 0)) / wall).toFixed(4))
      ])
    ),
    kernel_steps: m ? Number(m[1]) : null,
    kernel_steps_per_s: m ? Number(m[2]) : null
  };
  console.log(`bench ${label}: ${JSON.stringify(result)}`);
  return result;
}

test('stream 400 series at 250 steps/s: main-thread busy and fps', async ({
  page
}) => {
  await notebookWithPanel(page, 'bench.ipynb');
  await setSource(page, 0, CELL);
  await page.evaluate(() => {
    const w = window as any;
    w.__benchFrames = 0;
    const tick = () => {
      w.__benchFrames++;
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  // galata's page is a proxy: the session needs the real Page
  const real = page
    .context()
    .pages()
    .find(p => p.url() === page.url())!;
  const cdp = await page.context().newCDPSession(real);
  await cdp.send('Performance.enable');

  // the floor: the same page, panel shown, nothing streaming
  const i0 = await sample(page, cdp);
  await page.waitForTimeout(5000);
  const i1 = await sample(page, cdp);
  const idle = {
    panel: 'visible, idle kernel',
    busy_fraction: Number(
      ((i1.task - i0.task) / (i1.wall - i0.wall)).toFixed(4)
    ),
    fps: Number(((i1.frames - i0.frames) / (i1.wall - i0.wall)).toFixed(1))
  };
  console.log(`bench idle: ${JSON.stringify(idle)}`);
  const visible = await measure(page, cdp, 'visible');
  await expect(
    page.locator(`${PANEL} .jp-TorchDbg-seriesCard`).first()
  ).toBeVisible();
  const cards = await page.locator(`${PANEL} .jp-TorchDbg-seriesCard`).count();

  // another right sidebar tab: the panel is hidden
  await page.evaluate((panelId: string) => {
    const app = (window as any).jupyterapp;
    const other = [...app.shell.widgets('right')].find(
      (w: any) => w.id !== panelId
    );
    app.shell.activateById(other.id);
  }, PANEL.slice(1));
  await expect(page.locator(PANEL)).toBeHidden();
  const hidden = await measure(page, cdp, 'hidden');

  const results = {
    date: new Date().toISOString(),
    series: SERIES,
    steps_per_s: RATE,
    seconds: SECONDS,
    cards,
    viewport: page.viewportSize(),
    idle,
    visible,
    hidden
  };
  const file = process.env.BENCH_OUT ?? path.join(RESULTS, 'browser.json');
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(results, null, 2) + '\n');
});
