/**
 * Only checked facts about a NaN (R47), in Chromium: a loss written as an expression in
 * the cell goes +Inf from log(0) at step 10. The alert names the loss (read at the step,
 * never "the loss is finite"); the replay cannot re-run that expression and says so,
 * never "the NaN does not reproduce".
 */
import { expect, test } from '@jupyterlab/galata';

import { notebookWithPanel, PANEL, replayFrom, setSource } from './helpers';

test.use({ autoGoto: true, kernels: null });

const EXPRESSION_LOSS = [
  'import torch',
  'from torch import nn',
  'torch.manual_seed(0)',
  'model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))',
  'opt = torch.optim.SGD(model.parameters(), lr=0.05)',
  'for step in range(1, 21):',
  '    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))',
  '    keep = torch.ones(16)',
  '    if step == 10:',
  '        keep[3] = 0.0',
  '    p = model(x).softmax(-1).gather(1, y[:, None]).squeeze(1) * keep',
  '    loss = -torch.log(p).mean()',
  '    opt.zero_grad()',
  '    loss.backward()',
  '    opt.step()'
].join('\n');

test('r47: a loss the replay cannot re-run is said so, never "does not reproduce"', async ({
  page
}, testInfo) => {
  await notebookWithPanel(page, 'checked-facts.ipynb');
  await setSource(page, 0, EXPRESSION_LOSS);
  await page.notebook.runCell(0, true);
  const track = page.locator(
    `${PANEL} [data-section="grads"] .jp-TorchDbg-track[data-track="opt"]`
  );
  const cause = track.locator(
    '.jp-TorchDbg-alert[data-kind="non_finite_cause"]'
  );
  await expect(cause).toBeVisible({ timeout: 30000 });
  await expect(cause).toContainText('step 10');
  await expect(cause).toContainText(
    /the loss `loss` \(computed outside the model/
  );
  await expect(cause).toContainText(/is \+Inf at this step/);
  await expect(cause).not.toContainText(/loss is finite/);
  const replay = await replayFrom(track, cause);
  await expect(replay.locator('.jp-TorchDbg-replay')).toHaveAttribute(
    'data-cause',
    'finite'
  );
  await expect(replay).toContainText(/your loss was not re-run/);
  await expect(replay).toContainText(/not your loss/);
  await expect(replay).not.toContainText(/does not reproduce/);
  await expect(replay).not.toContainText(/random/);
  await page.locator(PANEL).screenshot({
    path: testInfo.outputPath('checked-facts-replay-light.png')
  });
});
