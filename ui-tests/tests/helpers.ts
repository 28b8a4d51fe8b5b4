import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { Locator } from '@playwright/test';

export const PANEL = '#jp-torchdbg-sidebar';

/** Set a cell's source through the model (no auto-indent surprises). */
export async function setSource(
  page: IJupyterLabPageFixture,
  index: number,
  source: string
): Promise<void> {
  await page.evaluate(
    ({ index, source }) => {
      const app = (window as any).jupyterapp;
      const nb = app.shell.currentWidget.content;
      while (nb.model.cells.length <= index) {
        nb.model.sharedModel.insertCell(nb.model.cells.length, {
          cell_type: 'code',
          source: ''
        });
      }
      nb.model.cells.get(index).sharedModel.setSource(source);
    },
    { index, source }
  );
}

/**
 * Show the panel, whatever its state (Ctrl+Shift+Y toggles it: after a reload
 * that restored it open, the key would hide it).
 */
export async function openPanel(page: IJupyterLabPageFixture): Promise<void> {
  await page.evaluate(() =>
    (window as any).jupyterapp.commands.execute('torchdbg:open-panel')
  );
}

/** A new notebook with the panel open and connected to its kernel. */
export async function notebookWithPanel(
  page: IJupyterLabPageFixture,
  name: string
): Promise<void> {
  await page.notebook.createNew(name);
  await page.notebook.setCell(0, 'code', '1');
  await openPanel(page);
  await expect(page.locator(`${PANEL} .jp-TorchDbg-body`)).toHaveAttribute(
    'data-state',
    'connected',
    { timeout: 60000 }
  );
}

/** Options of `explodingRnnCell`: what each test adds around the shared training code. */
export interface IExplodingRnnOptions {
  /** Training steps (`for step in range(steps)`). */
  steps: number;
  /** The loop body, one statement per line, without its indentation. */
  body: string[];
  /** Lines after `from torch import nn` (more imports). */
  imports?: string[];
  /** Lines after the optimizer is created, before the data. */
  afterOptimizer?: string[];
  /** Lines after the data, before the loop. */
  beforeLoop?: string[];
}

/**
 * A notebook cell training a small RNN whose gradients explode (SGD at lr 0.5 on
 * 30-step sequences, seed 0): `model` (layers `model.rnn`, `model.head`), `opt`,
 * data `x`, `y`; `time` and `torch` are imported. Tests add their own lines.
 */
export function explodingRnnCell(options: IExplodingRnnOptions): string {
  return [
    'import time, torch',
    'from torch import nn',
    ...(options.imports ?? []),
    'torch.manual_seed(0)',
    'class Net(nn.Module):',
    '    def __init__(self):',
    '        super().__init__()',
    '        self.rnn = nn.RNN(4, 32, batch_first=True)',
    '        self.head = nn.Linear(32, 1)',
    '    def forward(self, x):',
    '        out, _ = self.rnn(x)',
    '        return self.head(out[:, -1])',
    'model = Net()',
    'opt = torch.optim.SGD(model.parameters(), lr=0.5)',
    ...(options.afterOptimizer ?? []),
    'x, y = torch.randn(16, 30, 4), torch.randn(16, 1)',
    ...(options.beforeLoop ?? []),
    `for step in range(${options.steps}):`,
    ...options.body.map(line => `    ${line}`)
  ].join('\n');
}

/**
 * Click "Replay with anomaly detection" on a non-finite alert of `track`; returns
 * the replay's own alert once it is shown.
 */
export async function replayFrom(
  track: Locator,
  alert: Locator
): Promise<Locator> {
  await alert
    .getByRole('button', { name: 'Replay with anomaly detection' })
    .click();
  const replay = track.locator(
    '.jp-TorchDbg-alert[data-kind="non_finite_replay"]'
  );
  await expect(replay).toBeVisible({ timeout: 30000 });
  return replay;
}

/**
 * Elements under `root` (CSS selector) that scroll sideways: `scrollWidth` beyond
 * `clientWidth`, as "selector-ish: scrollWidth > clientWidth" lines (empty: none).
 */
export async function sidewaysScroll(
  page: IJupyterLabPageFixture,
  selectors: string[]
): Promise<string[]> {
  return page.evaluate(sels => {
    const out: string[] = [];
    for (const sel of sels) {
      document.querySelectorAll(sel).forEach(el => {
        if (el.scrollWidth > el.clientWidth) {
          // name the culprit: the innermost element reaching past the right edge
          const right = el.getBoundingClientRect().left + el.clientWidth;
          let culprit = '';
          el.querySelectorAll('*').forEach(child => {
            if (child.getBoundingClientRect().right > right + 0.5) {
              culprit = `${child.tagName.toLowerCase()}.${String(
                (child as HTMLElement).className
              ).replace(/\s+/g, '.')}`;
            }
          });
          const where = el
            .closest('[data-section]')
            ?.getAttribute('data-section');
          out.push(
            `${sel}${where ? ` [${where}]` : ''}: ${el.scrollWidth} > ${el.clientWidth} (${culprit})`
          );
        }
      });
    }
    return out;
  }, selectors);
}

/** Open (or collapse) a panel section by its id, whatever its state now. */
export async function setSectionOpen(
  page: IJupyterLabPageFixture,
  id: string,
  open: boolean
): Promise<void> {
  const section = page.locator(`${PANEL} [data-section="${id}"]`);
  if ((await section.getAttribute('data-open')) !== String(open)) {
    await section.locator('.jp-TorchDbg-sectionHeader').first().click();
  }
  await expect(section).toHaveAttribute('data-open', String(open));
}

/** Make the right sidebar `width` px wide (the width these tests look at). */
export async function sidebarWidth(
  page: IJupyterLabPageFixture,
  width: number
): Promise<void> {
  await page.evaluate(w => {
    const shell = (window as any).jupyterapp.shell;
    const split = shell._hsplitPanel;
    const total = split.node.clientWidth;
    const sizes = split.relativeSizes();
    const left = sizes[0] * total;
    split.setRelativeSizes([left, total - left - w, w].map(v => v / total));
  }, width);
  // the panel's own width: the sidebar's less its border and scrollbar
  await expect
    .poll(
      async () =>
        Math.abs(
          width - (await page.locator(PANEL).evaluate(el => el.offsetWidth))
        ),
      { timeout: 5000 }
    )
    .toBeLessThanOrEqual(2);
}

/**
 * The first cell of a multi-process test: load the extension, write the
 * worker module `module`.py (spawned ranks import it from the notebook's
 * folder), pick a free port as `PORT`; `extra` lines run before the port.
 */
export function rankWorkerSetup(
  module: string,
  source: string,
  extra: string[] = []
): string {
  return [
    '%load_ext jupyterlab_torchdbg',
    'import os, pathlib, socket, sys',
    `pathlib.Path("${module}.py").write_text(${JSON.stringify(source)})`,
    'sys.path.insert(0, os.getcwd())',
    ...extra,
    'with socket.socket() as s:',
    '    s.bind(("127.0.0.1", 0))',
    '    PORT = s.getsockname()[1]',
    'print("worker written", PORT)'
  ].join('\n');
}

/** The launching cell: ``mp.spawn`` of ``module.run`` on 2 ranks with ``args``. */
export function spawnLaunch(module: string, args: string): string {
  return [
    'import torch.multiprocessing as mp',
    `import ${module}`,
    `mp.spawn(${module}.run, args=(${args}), nprocs=2, join=True)`,
    'print("job done")'
  ].join('\n');
}

/** A new notebook with the panel, only the Ranks section in the way. */
export async function notebookForRanks(
  page: IJupyterLabPageFixture,
  name: string
): Promise<void> {
  await notebookWithPanel(page, name);
  for (const id of ['series', 'grads', 'control', 'memory']) {
    await setSectionOpen(page, id, false);
  }
}

/**
 * Simulated ranks (`jupyterlab_torchdbg.ranks_sim`: worker processes sending
 * the real signed messages to this kernel) in a new notebook with the panel
 * at the default 250 px, only the Ranks section in the way: cell 0 loads the
 * extension. Returns the Ranks section (absent until a job attaches).
 */
export async function notebookForSimRanks(
  page: IJupyterLabPageFixture,
  name: string
): Promise<Locator> {
  await notebookForRanks(page, name);
  await sidebarWidth(page, 250);
  await setSource(
    page,
    0,
    [
      '%load_ext jupyterlab_torchdbg',
      'from jupyterlab_torchdbg import ranks_sim',
      'print("ready")'
    ].join('\n')
  );
  await page.notebook.runCell(0, true);
  return page.locator(`${PANEL} [data-section="ranks"]`);
}

/**
 * Cell 1 starts `world` simulated ranks for `seconds`, one job (the cell
 * returns at once); then opens the Ranks section and waits until every rank
 * is in its many-ranks view. Returns that view (`.jp-TorchDbg-rankScale`).
 */
export async function startSimRanks(
  page: IJupyterLabPageFixture,
  world: number,
  seconds: number
): Promise<Locator> {
  await setSource(
    page,
    1,
    `sim = ranks_sim.start(${world}, seconds=${seconds})\nprint("started", len(sim))`
  );
  await page.notebook.runCell(1, true);
  const section = page.locator(`${PANEL} [data-section="ranks"]`);
  await expect(section).toBeVisible({ timeout: 60000 });
  await setSectionOpen(page, 'ranks', true);
  const scale = section.locator('.jp-TorchDbg-rankScale');
  await expect(scale).toHaveAttribute('data-ranks', String(world), {
    timeout: 60000
  });
  return scale;
}

/** Cell 2 waits for the simulated job's end (every rank says bye), shown as ended. */
export async function endSimRanks(
  page: IJupyterLabPageFixture,
  section: Locator
): Promise<void> {
  await setSource(page, 2, 'print("sent", ranks_sim.wait(sim))');
  await page.notebook.runCell(2, true);
  await expect(section.locator('.jp-TorchDbg-ranksHeader')).toContainText(
    'ended',
    { timeout: 60000 }
  );
}
