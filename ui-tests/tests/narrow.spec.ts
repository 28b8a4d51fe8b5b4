/**
 * Readable at JupyterLab's default sidebar width (issue #22, item 9), light
 * and dark, on a real kernel: a model whose layers share a long prefix and
 * differ in the middle (`…blocks.0.attention_output_projection` and
 * `…blocks.1.…`, `…encoder_recurrent_stack` and `…decoder_recurrent_stack`)
 * trains three runs; the last one's gradients grow to ~1e18 and then NaN.
 * Checked: no number or header cell of the layer table, no figure of the Now
 * strip and no line of the track header is cut (scrollWidth <= clientWidth),
 * the sampling line is whole, every layer shows a distinct label (the full
 * name in its tooltip), and comparing with an earlier run draws a legend
 * naming both runs. Screenshots of each view in both themes go to
 * test-results (CI copies them to the artifacts).
 */
import { expect, test } from '@jupyterlab/galata';

import {
  notebookWithPanel,
  PANEL,
  setSectionOpen,
  setSource,
  sidewaysScroll
} from './helpers';

test.use({ autoGoto: true, kernels: null });

const MODEL = [
  'import time, torch',
  'from torch import nn',
  'from jupyterlab_torchdbg import log',
  'class Seq2Seq(nn.Module):',
  '    def __init__(self):',
  '        super().__init__()',
  '        self.encoder_recurrent_stack = nn.RNN(4, 16, batch_first=True)',
  '        self.decoder_recurrent_stack = nn.RNN(16, 16, batch_first=True)',
  '        self.blocks = nn.ModuleList(',
  '            nn.ModuleDict({"attention_output_projection": nn.Linear(16, 16)})',
  '            for _ in range(3))',
  '        self.output_projection_head = nn.Linear(16, 1)',
  '    def forward(self, x):',
  '        h, _ = self.encoder_recurrent_stack(x)',
  '        h, _ = self.decoder_recurrent_stack(h)',
  '        h = h[:, -1]',
  '        for block in self.blocks:',
  '            h = torch.tanh(block["attention_output_projection"](h))',
  '        return self.output_projection_head(h)',
  'def train(steps, lr, seed, blow_up_at=None):',
  '    torch.manual_seed(seed)',
  '    global sequence_to_sequence_model, opt',
  '    sequence_to_sequence_model = Seq2Seq()',
  '    opt = torch.optim.SGD(sequence_to_sequence_model.parameters(), lr=lr)',
  '    x, y = torch.randn(16, 12, 4), torch.randn(16, 1)',
  '    for step in range(steps):',
  '        opt.zero_grad()',
  '        loss = nn.functional.mse_loss(sequence_to_sequence_model(x), y)',
  '        log(loss=loss)',
  '        if blow_up_at is not None and step >= blow_up_at:',
  '            loss = loss * 1e18  # gradients of ~1e18, then weights that overflow',
  '        loss.backward()',
  '        opt.step()',
  '        time.sleep(0.004)',
  'print("model defined")'
].join('\n');

/** Cells of the three runs: two healthy ones, then a blow-up within the first 100 steps (every step sampled then). */
const RUNS = [
  'train(120, 0.02, 0)',
  'train(120, 0.1, 1)',
  'train(110, 0.02, 2, blow_up_at=50)'
];

/** Number and header cells of the layer table, Now strip figures, track lines. */
const MUST_FIT = [
  '.jp-TorchDbg-layerTable th',
  '.jp-TorchDbg-layerTable td.jp-mod-num',
  '.jp-TorchDbg-now .jp-TorchDbg-nowLabel',
  '.jp-TorchDbg-now .jp-TorchDbg-nowValue',
  '.jp-TorchDbg-now .jp-TorchDbg-nowItem',
  '.jp-TorchDbg-now .jp-TorchDbg-nowAlarms',
  '.jp-TorchDbg-trackMeta',
  '.jp-TorchDbg-strideReason',
  '.jp-TorchDbg-chartTitle',
  '.jp-TorchDbg-legend li > span:last-child',
  '.jp-TorchDbg-chartLegendItem',
  '.jp-TorchDbg-seriesValue',
  '.jp-TorchDbg-seriesFooter'
];

/** Elements of `selectors` whose text is cut by their box (as "selector: text"). */
async function clipped(
  page: import('@jupyterlab/galata').IJupyterLabPageFixture
): Promise<string[]> {
  return page.evaluate(
    ({ panel, selectors }) => {
      const out: string[] = [];
      for (const sel of selectors) {
        document.querySelectorAll(`${panel} ${sel}`).forEach(el => {
          const box = el as HTMLElement;
          if (box.scrollWidth > box.clientWidth + 0.5) {
            out.push(
              `${sel}: "${box.textContent}" ${box.scrollWidth} > ${box.clientWidth}`
            );
          }
        });
      }
      return out;
    },
    { panel: PANEL, selectors: MUST_FIT }
  );
}

/** The layer column's labels and full names, as shown. */
async function layerLabels(
  page: import('@jupyterlab/galata').IJupyterLabPageFixture
): Promise<{ label: string; name: string; cut: boolean }[]> {
  return page
    .locator(`${PANEL} .jp-TorchDbg-layerTable td.jp-TorchDbg-layerName`)
    .evaluateAll(cells =>
      cells.map(td => ({
        label: td.textContent ?? '',
        name: td.getAttribute('data-name') ?? '',
        cut: td.scrollWidth > td.clientWidth + 0.5
      }))
    );
}

test('readable at the default sidebar width: long layer names, huge numbers, NaN, a compared run; light and dark', async ({
  page
}, testInfo) => {
  test.setTimeout(420000);
  await notebookWithPanel(page, 'narrow.ipynb');
  const width = await page.locator(PANEL).evaluate(el => el.clientWidth);
  expect(width).toBeLessThanOrEqual(300);
  await setSource(page, 0, MODEL);
  await page.notebook.runCell(0, true);
  for (const [i, code] of RUNS.entries()) {
    await setSource(page, i + 1, code);
    await page.notebook.runCell(i + 1, true);
  }
  const grads = page.locator(`${PANEL} [data-section="grads"]`);
  // the last run's table: huge numbers and NaN
  await expect(grads.locator('.jp-TorchDbg-layerTable')).toContainText('NaN', {
    timeout: 30000
  });
  await expect(grads.locator('.jp-TorchDbg-layerTable')).toContainText(
    /e1[5-9]|e2\d|e3\d/
  );
  // sorted by the NaN column: its header carries the sort mark
  const nanHeader = grads.locator('.jp-TorchDbg-layerTable th', {
    hasText: 'NaN'
  });
  await nanHeader.click();
  await expect(nanHeader).toHaveAttribute('aria-sort', /ending/);

  for (const theme of ['light', 'dark'] as const) {
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
    }
    await setSectionOpen(page, 'grads', true);
    await grads.locator('.jp-TorchDbg-layerTable').scrollIntoViewIfNeeded();
    await page
      .locator(PANEL)
      .screenshot({ path: testInfo.outputPath(`narrow-${theme}-grads.png`) });
    // the names: distinct labels, each fitting its cell, the full name in the tooltip
    const labels = await layerLabels(page);
    expect(labels).toHaveLength(6);
    expect(new Set(labels.map(l => l.label)).size).toBe(labels.length);
    expect(labels.filter(l => l.cut)).toEqual([]);
    for (const l of labels) {
      expect(l.name.startsWith('sequence_to_sequence_model.')).toBe(true);
    }
    const blocks = labels.filter(l => l.name.includes('.blocks.'));
    expect(blocks).toHaveLength(3);
    blocks.forEach(b => expect(b.label).toMatch(/[012]/));
    expect(await clipped(page)).toEqual([]);
    expect(
      await sidewaysScroll(page, [PANEL, `${PANEL} .jp-TorchDbg-tableWrap`])
    ).toEqual([]);
    await grads
      .locator('.jp-TorchDbg-trackHeader')
      .first()
      .evaluate(el => el.scrollIntoView({ block: 'start' }));
    await page.locator(PANEL).screenshot({
      path: testInfo.outputPath(`narrow-${theme}-track.png`)
    });
    if (theme === 'dark') {
      await page.theme.setLightTheme();
    }
  }

  // compare: the second run shown, the first drawn with it, a legend naming both
  const pick = page.locator(`${PANEL} .jp-TorchDbg-runPick`);
  const runs = await pick
    .locator('option')
    .evaluateAll(os => os.map(o => (o as HTMLOptionElement).value));
  const [second, first] = runs.slice(-2);
  await pick.selectOption(second);
  await page.locator(`${PANEL} .jp-TorchDbg-runCompare`).selectOption(first);
  await setSectionOpen(page, 'series', true);
  const card = page.locator(
    `${PANEL} .jp-TorchDbg-seriesCard[data-series="loss"]`
  );
  const legend = card.locator('.jp-TorchDbg-chartLegend');
  await expect(legend).toBeVisible();
  await expect(legend.locator('[data-kind="shown"]')).toHaveText(
    `run ${second}`
  );
  await expect(legend.locator('[data-kind="compare"]')).toHaveText(
    `run ${first}`
  );
  for (const theme of ['light', 'dark'] as const) {
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
    }
    await card.scrollIntoViewIfNeeded();
    expect(await clipped(page)).toEqual([]);
    await page.locator(PANEL).screenshot({
      path: testInfo.outputPath(`narrow-${theme}-compare.png`)
    });
    await page.locator(PANEL).evaluate(el => el.scrollTo({ top: 0 }));
  }
  await page.theme.setLightTheme();

  // huge logged values, one under a long name: the Now strip keeps the label
  // "loss" and the value whole, the cards their values
  await setSource(
    page,
    RUNS.length + 1,
    [
      'for i in range(1, 4):',
      '    log(loss=1.39e18 * i, validation_perplexity_of_the_whole_corpus=-2.5e-17 * i)'
    ].join('\n')
  );
  await page.notebook.runCell(RUNS.length + 1, true);
  const now = page.locator(`${PANEL} .jp-TorchDbg-now`);
  await expect(now.locator('.jp-TorchDbg-nowLoss')).toHaveText(/^loss4\.2e18$/);
  // the newest run shown: its cards, one with a long name and a tiny value
  const newest = await pick
    .locator('option')
    .first()
    .evaluate(o => (o as HTMLOptionElement).value);
  await pick.selectOption(newest);
  // a run of log() calls only: no step count borrowed from the run before it
  await expect(pick.locator('option').first()).toHaveText(/log\(\) only$/);
  await expect(
    page.locator(`${PANEL} .jp-TorchDbg-seriesCard`).nth(1)
  ).toBeVisible();
  for (const theme of ['light', 'dark'] as const) {
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
    }
    await page.locator(PANEL).evaluate(el => el.scrollTo({ top: 0 }));
    expect(await clipped(page)).toEqual([]);
    await page.locator(PANEL).screenshot({
      path: testInfo.outputPath(`narrow-${theme}-top.png`)
    });
  }
  await page.theme.setLightTheme();
});
