/**
 * Gradient signals in Chromium (issue #13): a NaN in a keyword input is named at its
 * step and the step is skipped from the panel's checkbox; a loop without torch.optim is
 * watched at the end of backward; one click replays a bad step under anomaly detection.
 */
import { expect, test } from '@jupyterlab/galata';

import { notebookWithPanel, PANEL, replayFrom, setSource } from './helpers';

test.use({ autoGoto: true, kernels: null });

// An HF-style model called with keyword arguments; batch 25 carries a NaN in its
// float `attention_mask` at [1, 3].
const KWARGS_MODEL = [
  'import time, torch',
  'from torch import nn',
  'torch.manual_seed(0)',
  'class Tagger(nn.Module):',
  '    def __init__(self):',
  '        super().__init__()',
  '        self.emb = nn.Embedding(50, 16)',
  '        self.head = nn.Linear(16, 3)',
  '    def forward(self, input_ids=None, attention_mask=None):',
  '        h = self.emb(input_ids) * attention_mask.unsqueeze(-1)',
  '        return self.head(h.mean(1))',
  'model = Tagger()',
  'opt = torch.optim.AdamW(model.parameters(), lr=1e-3)',
  'crit = nn.CrossEntropyLoss()'
].join('\n');

const KWARGS_LOOP = [
  'for step in range(1, 61):',
  '    ids = torch.randint(0, 50, (4, 6))',
  '    mask = torch.ones(4, 6)',
  '    if step == 25:',
  "        mask[1, 3] = float('nan')",
  '    loss = crit(model(input_ids=ids, attention_mask=mask), torch.randint(0, 3, (4,)))',
  '    opt.zero_grad()',
  '    loss.backward()',
  '    opt.step()',
  '    time.sleep(0.02)',
  "print('finite weights:', all(bool(torch.isfinite(p).all()) for p in model.parameters()))"
].join('\n');

test('a NaN in a keyword input is named at its step, and skipped', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'nan-input.ipynb');
  await setSource(page, 0, KWARGS_MODEL);
  await page.notebook.runCell(0, true);
  // skip non-finite steps from the panel before training (applies to new optimizers)
  const grads = page.locator(`${PANEL} [data-section="grads"]`);
  const skip = grads.locator('.jp-TorchDbg-skipNonfinite');
  await expect(skip).toBeVisible({ timeout: 30000 });
  await skip.check();
  await expect(skip).toBeChecked();
  await setSource(page, 1, KWARGS_LOOP);
  await page.notebook.runCell(1, true);
  const track = grads.locator('.jp-TorchDbg-track[data-track="opt"]');
  const cause = track.locator(
    '.jp-TorchDbg-alert[data-kind="non_finite_cause"]'
  );
  await expect(cause).toBeVisible({ timeout: 30000 });
  await expect(cause).toContainText('step 25');
  await expect(cause).toContainText(
    /`attention_mask` \(4x6\) at index \[1, 3\]/
  );
  await expect(cause).toContainText(/step was skipped/);
  await expect(track.locator('.jp-TorchDbg-skippedNonfinite')).toContainText(
    '1 non-finite steps skipped'
  );
  // the skip kept the weights finite: the cell's own check says so
  await expect(page.locator('.jp-OutputArea-output').last()).toContainText(
    'finite weights: True'
  );
  // no "lower the learning rate" for a bad batch
  await expect(cause.locator('.jp-TorchDbg-alertRemedy')).not.toContainText(
    /learning rate/
  );
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('signals-nan-input-light.png') });
  await page.theme.setDarkTheme();
  await page.waitForTimeout(500);
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('signals-nan-input-dark.png') });
  await page.theme.setLightTheme();
});

const MANUAL_MODEL = [
  'import time, torch',
  'from torch import nn',
  'torch.manual_seed(0)',
  'net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))'
].join('\n');

// The classic manual update (no optimizer); the learning rate is raised at step 80.
const MANUAL_LOOP = [
  'lr = 0.01',
  'for step in range(1, 201):',
  '    x = torch.randn(16, 8)',
  '    loss = (net(x) - x.sum(1, keepdim=True) * 50).pow(2).mean()',
  '    net.zero_grad()',
  '    loss.backward()',
  '    if step == 80:',
  '        lr = 3.0',
  '    for p in net.parameters():',
  '        p.data.add_(p.grad, alpha=-lr)',
  '    time.sleep(0.03)'
].join('\n');

test('a loop without torch.optim is watched at the end of backward', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'manual-loop.ipynb');
  await setSource(page, 0, MANUAL_MODEL);
  await page.notebook.runCell(0, true);
  await setSource(page, 1, MANUAL_LOOP);
  const run = page.notebook.runCell(1, true);
  const grads = page.locator(`${PANEL} [data-section="grads"]`);
  const track = grads.locator('.jp-TorchDbg-track[data-track="net"]');
  await expect(track).toBeVisible({ timeout: 30000 });
  await expect(track.locator('.jp-TorchDbg-boundary')).toHaveText(
    'end of backward'
  );
  // why it samples as it does, in the kernel's words
  await expect(track.locator('.jp-TorchDbg-strideReason')).toContainText(
    /every step/
  );
  // the LR jump is alarmed while the cell runs, naming a layer of the model
  const alert = track.locator('.jp-TorchDbg-alert[data-kind="explosion"]');
  await expect(alert).toBeVisible({ timeout: 30000 });
  await expect(alert).toContainText(/net\.(0|2)/);
  await expect(page.locator('.jp-Cell .jp-InputPrompt').nth(1)).toContainText(
    '*'
  );
  await run;
  await expect(page.locator(`${PANEL}`)).not.toContainText(/no optimizer step/);
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('signals-manual-loop-light.png') });
});

// A finite forward whose backward makes the NaN: sqrt at exactly 0 (a zero row).
const SQRT_AT_ZERO = [
  'import torch',
  'from torch import nn',
  'torch.manual_seed(0)',
  'class Unit(nn.Module):',
  '    def __init__(self):',
  '        super().__init__()',
  '        self.proj = nn.Linear(4, 4, bias=False)',
  '        self.head = nn.Linear(4, 1)',
  '    def forward(self, x):',
  '        h = self.proj(x)',
  '        return self.head(h) + 0.1 * torch.sqrt((h ** 2).sum(1, keepdim=True))',
  'model = Unit()',
  'opt = torch.optim.SGD(model.parameters(), lr=0.01)',
  'crit = nn.MSELoss()',
  'for step in range(1, 31):',
  '    x = torch.randn(4, 4)',
  '    if step == 15:',
  '        x[1] = 0.0',
  '    loss = crit(model(x), torch.randn(4, 1))',
  '    opt.zero_grad()',
  '    loss.backward()',
  '    opt.step()'
].join('\n');

test('one click replays the bad step and names the backward op', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'replay.ipynb');
  await setSource(page, 0, SQRT_AT_ZERO);
  await page.notebook.runCell(0, true);
  const track = page.locator(
    `${PANEL} [data-section="grads"] .jp-TorchDbg-track[data-track="opt"]`
  );
  const cause = track.locator(
    '.jp-TorchDbg-alert[data-kind="non_finite_cause"]'
  );
  await expect(cause).toBeVisible({ timeout: 30000 });
  await expect(cause).toContainText('step 15');
  // a forward with user code is not re-run by itself (it may have side effects,
  // R53): the alarm says so, and Replay (one click) re-runs it once
  await expect(cause).toContainText(
    /the forward was not re-run: code in Unit\.forward may have side effects/
  );
  const replay = await replayFrom(track, cause);
  await expect(replay.locator('.jp-TorchDbg-replayOp').first()).toHaveText(
    'SqrtBackward0'
  );
  // the forward stack ends at the cell's line that built the sqrt
  await expect(
    replay.locator('.jp-TorchDbg-replayStack li').last()
  ).toContainText('torch.sqrt((h ** 2).sum(1, keepdim=True))');
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('signals-replay-light.png') });
  await page.theme.setDarkTheme();
  await page.waitForTimeout(500);
  await page
    .locator(PANEL)
    .screenshot({ path: testInfo.outputPath('signals-replay-dark.png') });
  await page.theme.setLightTheme();
});
