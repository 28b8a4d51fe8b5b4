/**
 * Browser benchmark: the panel while a kernel streams 400 `log()` series at
 * 250 steps/s, once with the panel visible and once hidden (another right
 * sidebar tab shown). Per case, over a 10 s window after 3 s of start-up:
 * main-thread busy fraction from the Chrome DevTools Protocol
 * (`Performance.getMetrics`: TaskDuration, ScriptDuration, ... deltas over
 * wall time), frames per second from a requestAnimationFrame counter, the
 * kernel messages that arrived, and what the page holds (nodes, canvases,
 * composited layers). Then a 5 s traced window (not measured: tracing costs
 * time of its own) summarised by `traceSummary.ts`: main-thread self time by
 * category and event, the JavaScript functions with the most self time.
 * Writes `bench-results/browser.json` (or `$BENCH_OUT`). Not a pass/fail test.
 */
import { expect, test } from '@jupyterlab/galata';
import type { CDPSession } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

import { notebookWithPanel, PANEL, setSource } from '../tests/helpers';
import { install, sample, window as between } from './pageMetrics';
import {
  ICpuProfile,
  ITraceEvent,
  summarizeProfile,
  summarizeTrace
} from './traceSummary';

test.use({ autoGoto: true });

const SERIES = 400;
const RATE = 250;
/** Measured window inside each stream: after start-up, before the end. */
const SETTLE_MS = 3000;
const WINDOW_MS = 10000;
/**
 * After the measured window, a traced one (a Chrome trace and a CPU profile:
 * where the time goes; tracing costs time of its own, so not measured above).
 * BENCH_TRACE=0: none; BENCH_TRACE=keep: also keep the raw trace file.
 */
const TRACE = process.env.BENCH_TRACE !== '0';
const TRACE_MS = 5000;
const SECONDS = Math.ceil(
  (SETTLE_MS + WINDOW_MS + (TRACE ? TRACE_MS : 0)) / 1000 + 2
);

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

/** What the page holds while streaming: nodes, canvases, composited layers. */
async function domFacts(page: any, cdp: CDPSession) {
  const inPage = await page.evaluate((panel: string) => {
    const root = document.querySelector(panel);
    return {
      page_nodes: document.getElementsByTagName('*').length,
      panel_nodes: root ? root.getElementsByTagName('*').length : 0,
      panel_canvases: root ? root.getElementsByTagName('canvas').length : 0,
      // canvases of the panel that overlap the window (the rest are off-screen)
      panel_canvases_on_screen: root
        ? [...root.getElementsByTagName('canvas')].filter(c => {
            const r = c.getBoundingClientRect();
            return r.width > 0 && r.bottom > 0 && r.top < window.innerHeight;
          }).length
        : 0
    };
  }, PANEL);
  let layers: number | null = null;
  /** Layers by size (width x height: which are canvases, which the page's). */
  const layerSizes: Record<string, number> = {};
  try {
    const got = new Promise<number>(resolve => {
      cdp.once('LayerTree.layerTreeDidChange', (e: any) => {
        for (const l of e.layers ?? []) {
          const size = `${Math.round(l.width)}x${Math.round(l.height)}`;
          layerSizes[size] = (layerSizes[size] ?? 0) + 1;
        }
        resolve((e.layers ?? []).length);
      });
    });
    await cdp.send('LayerTree.enable');
    layers = await Promise.race([
      got,
      new Promise<number | null>(r => setTimeout(() => r(null), 3000))
    ]);
    await cdp.send('LayerTree.disable');
  } catch {
    layers = null;
  }
  return { ...inPage, composited_layers: layers, layer_sizes: layerSizes };
}

/**
 * A Chrome trace (devtools.timeline) and a CPU profile of `TRACE_MS` of the
 * stream, summarised: self time by category and event, top JS functions.
 */
async function traceWindow(page: any, cdp: CDPSession, label: string) {
  const browser = page.context().browser()!;
  await browser.startTracing(undefined, {
    categories: [
      'toplevel',
      'devtools.timeline',
      'disabled-by-default-devtools.timeline',
      'disabled-by-default-devtools.timeline.frame',
      'v8.execute',
      'blink.user_timing',
      // more, comma-separated (e.g. disabled-by-default-devtools.timeline.invalidationTracking)
      ...(process.env.BENCH_TRACE_CATS ?? '').split(',').filter(c => c)
    ]
  });
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 500 });
  await cdp.send('Profiler.start');
  await page.waitForTimeout(TRACE_MS);
  const { profile } = (await cdp.send('Profiler.stop')) as {
    profile: ICpuProfile;
  };
  await cdp.send('Profiler.disable');
  const raw: Buffer = await browser.stopTracing();
  if (process.env.BENCH_TRACE === 'keep') {
    fs.mkdirSync(RESULTS, { recursive: true });
    fs.writeFileSync(path.join(RESULTS, `trace-${label}.json`), raw);
    fs.writeFileSync(
      path.join(RESULTS, `profile-${label}.cpuprofile`),
      JSON.stringify(profile)
    );
  }
  const parsed = JSON.parse(raw.toString('utf8'));
  const events: ITraceEvent[] = Array.isArray(parsed)
    ? parsed
    : parsed.traceEvents;
  return {
    trace: summarizeTrace(events),
    profile: summarizeProfile(profile)
  };
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
  const a = await sample(page, cdp);
  const pa = await points(page);
  await page.waitForTimeout(WINDOW_MS);
  const b = await sample(page, cdp);
  const pb = await points(page);
  // after the measured window (a screenshot costs the page a paint of its own)
  if (label === 'visible') {
    await page.locator(PANEL).screenshot({
      path: path.join(RESULTS, 'bench-panel-visible.png')
    });
  }
  const where = TRACE ? await traceWindow(page, cdp, label) : null;
  const dom = await domFacts(page, cdp);
  const output = async () =>
    (await page.notebook.getCellTextOutput(0))?.join('') ?? '';
  await expect.poll(output, { timeout: 60000 }).toMatch(/BENCH steps=\d+/);
  const out = await output();
  const m = /BENCH steps=(\d+) rate=([\d.]+)/.exec(out);
  const wall = b.wall - a.wall;
  const result = {
    panel: label,
    ...between(a, b),
    // the first card's point count, read from the model (the panel kept up?)
    points_per_s_first_series:
      pa < 0 || pb < 0 ? null : Math.round((pb - pa) / wall),
    dom,
    trace: where?.trace ?? null,
    profile: where?.profile ?? null,
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
  const cdp = await install(page);

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
