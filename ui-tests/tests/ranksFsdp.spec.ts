/**
 * An FSDP job from the notebook (#25), in Chromium with a real kernel: a cell
 * writes a worker module that shards a small model with FSDP2's `fully_shard`
 * on CPU (gloo) and runs it on 2 ranks with `torch.multiprocessing.spawn`.
 * Each rank reads only its own shards; the Ranks section says so (the grid's
 * norm column is "shard") and shows the job's global gradient norm, combined
 * in the kernel from the ranks' shard norms, moving with the steps; "Clip all
 * ranks" is off with the reason. At the end the last global norm shown equals
 * the one torch's `clip_grad_norm_` computed at that step (the workers wrote
 * it). Screenshots at 250 px, light and dark.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  notebookForRanks,
  rankWorkerSetup,
  PANEL,
  setSectionOpen,
  setSource,
  spawnLaunch,
  sidebarWidth,
  sidewaysScroll
} from './helpers';

test.use({ autoGoto: true, kernels: null });

const WORKER = [
  'import json, os, time',
  'import torch',
  'import torch.distributed as dist',
  'from torch import nn',
  'from torch.distributed.device_mesh import init_device_mesh',
  'from torch.distributed.fsdp import fully_shard',
  '',
  '',
  'def run(rank, world, port, steps):',
  '    os.environ["MASTER_ADDR"] = "127.0.0.1"',
  '    os.environ["MASTER_PORT"] = str(port)',
  '    dist.init_process_group("gloo", rank=rank, world_size=world)',
  '    torch.manual_seed(0)',
  '    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))',
  '    mesh = init_device_mesh("cpu", (world,))',
  '    fully_shard(model[0], mesh=mesh)',
  '    fully_shard(model[2], mesh=mesh)',
  '    fully_shard(model, mesh=mesh)',
  '    opt = torch.optim.SGD(model.parameters(), lr=0.05)',
  '    g = torch.Generator().manual_seed(rank)',
  '    x, y = torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)',
  '    norms = {}',
  '    for step in range(steps):',
  '        opt.zero_grad()',
  '        nn.functional.mse_loss(model(x), y).backward()',
  '        total = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))',
  '        norms[step + 1] = float(total.full_tensor())',
  '        opt.step()',
  '        time.sleep(0.05)',
  '    if rank == 0:',
  '        with open("fsdp_norms.json", "w") as f:',
  '            json.dump(norms, f)',
  '    dist.destroy_process_group()',
  ''
].join('\n');

const SETUP = rankWorkerSetup('fsdp_worker', WORKER);

const LAUNCH = spawnLaunch('fsdp_worker', '2, PORT, 200');

const GLOBAL =
  /^Global gradient norm \(FSDP, from 2 ranks’ shards\): ([\d.e-]+) at step (\d+)$/;

test('an FSDP job: the global gradient norm from the ranks’ shards, live, and no all-rank clip', async ({
  page
}, testInfo) => {
  test.setTimeout(300000);
  await notebookForRanks(page, 'ranks-fsdp.ipynb');
  await setSource(page, 0, SETUP);
  await page.notebook.runCell(0, true);
  await setSource(page, 1, LAUNCH);
  const run = page.notebook.runCell(1, true);
  const section = page.locator(`${PANEL} [data-section="ranks"]`);
  await expect(section).toBeVisible({ timeout: 90000 });
  await setSectionOpen(page, 'ranks', true);
  await expect(section.locator('.jp-TorchDbg-rankRow')).toHaveCount(2, {
    timeout: 60000
  });
  await expect(section.locator('.jp-TorchDbg-rankHead')).toContainText('shard');
  await expect(section.locator('.jp-TorchDbg-rankCharts')).toContainText(
    'shard gradient norm by rank'
  );
  const line = section.locator('.jp-TorchDbg-ranksGlobalNorm');
  await expect(line).toHaveText(GLOBAL, { timeout: 60000 });
  const at = async () =>
    Number(GLOBAL.exec((await line.textContent()) ?? '')?.[2] ?? 0);
  // live: the step it is given at moves on while the job trains
  const first = await at();
  await expect.poll(at, { timeout: 30000 }).toBeGreaterThan(first);

  const clip = section.getByRole('button', { name: 'Clip all ranks' });
  await expect(clip).toBeDisabled();
  await expect(clip).toHaveAttribute('title', /sharded \(FSDP\)/);

  await sidebarWidth(page, 250);
  expect
    .soft(
      await sidewaysScroll(page, [
        PANEL,
        `${PANEL} .jp-TorchDbg-rankGrid`,
        `${PANEL} .jp-TorchDbg-ranksGlobalNorm`
      ])
    )
    .toEqual([]);
  await section.scrollIntoViewIfNeeded();
  await section.screenshot({
    path: testInfo.outputPath('ranks-fsdp-light.png')
  });
  await page.theme.setDarkTheme();
  await page.waitForTimeout(500);
  await section.screenshot({
    path: testInfo.outputPath('ranks-fsdp-dark.png')
  });
  await page.theme.setLightTheme();

  // the job ends: the last global norm shown is torch's at that step
  await run;
  await expect(section.locator('.jp-TorchDbg-ranksHeader')).toContainText(
    'ended',
    { timeout: 60000 }
  );
  const [, shown, step] = GLOBAL.exec((await line.textContent()) ?? '')!;
  await setSource(
    page,
    2,
    `import json; print(json.load(open("fsdp_norms.json"))["${step}"])`
  );
  await page.notebook.runCell(2, true);
  const torchSays = Number(
    (await page.notebook.getCellTextOutput(2))?.[0]?.trim()
  );
  expect(Math.abs(Number(shown) - torchSays) / torchSays).toBeLessThan(1e-3);
});
