/**
 * A rank's gradient alarm names its layer as the notebook does (#25 part 1:
 * one naming for the kernel and the ranks), in Chromium with a real kernel: a
 * 2-rank gloo DDP job from the notebook trains `model = Net()` (an `encoder`
 * and a `head`) wrapped as `ddp`; at step 26 rank 1's targets are 10,000, so
 * the all-reduced gradient explodes on both ranks. The Ranks section's
 * explosion alarm says both ranks saw it and names the layer
 * `model.encoder.0` or `model.head`: the variable's name first, DDP's
 * `module.` level gone, as the gradients panel names a model trained in the
 * notebook itself. Readable at a 250 px sidebar; screenshots light and dark.
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
  'import os, time',
  'import torch',
  'import torch.distributed as dist',
  'from torch import nn',
  '',
  '',
  'class Net(nn.Module):',
  '    def __init__(self):',
  '        super().__init__()',
  '        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.Tanh())',
  '        self.head = nn.Linear(16, 2)',
  '',
  '    def forward(self, x):',
  '        return self.head(self.encoder(x))',
  '',
  '',
  'def run(rank, world, port):',
  '    os.environ["MASTER_ADDR"] = "127.0.0.1"',
  '    os.environ["MASTER_PORT"] = str(port)',
  '    dist.init_process_group("gloo", rank=rank, world_size=world)',
  '    torch.manual_seed(0)',
  '    model = Net()',
  '    ddp = nn.parallel.DistributedDataParallel(model)',
  '    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)',
  '    g = torch.Generator().manual_seed(1000 + rank)',
  '    for i in range(40):',
  '        x = torch.randn(32, 8, generator=g)',
  '        target = 1e4 if rank == 1 and i == 25 else 0.0',
  '        loss = (ddp(x) - target).pow(2).mean()',
  '        opt.zero_grad()',
  '        loss.backward()',
  '        time.sleep(0.05)',
  '        opt.step()',
  '    dist.barrier()',
  '    dist.destroy_process_group()',
  ''
].join('\n');

const SETUP = rankWorkerSetup('spike_worker', WORKER);

const LAUNCH = spawnLaunch('spike_worker', '2, PORT');

const NO_SIDEWAYS = [
  PANEL,
  `${PANEL} .jp-TorchDbg-body`,
  `${PANEL} [data-section="ranks"] .jp-TorchDbg-sectionBody`,
  `${PANEL} .jp-TorchDbg-rankAlarms`
];

test("an exploding gradient on a DDP job: the alarm names the layer with the notebook's name", async ({
  page
}, testInfo) => {
  test.setTimeout(300000);
  await notebookForRanks(page, 'ranks-alarms.ipynb');
  await setSource(page, 0, SETUP);
  await page.notebook.runCell(0, true);
  await setSource(page, 1, LAUNCH);
  const run = page.notebook.runCell(1, true);
  const section = page.locator(`${PANEL} [data-section="ranks"]`);
  await expect(section).toBeVisible({ timeout: 90000 });
  await setSectionOpen(page, 'ranks', true);
  const alarm = section.locator(
    '.jp-TorchDbg-rankAlarm[data-kind="explosion"]'
  );
  await expect(alarm).toHaveCount(1, { timeout: 90000 });
  await expect(alarm.locator('.jp-TorchDbg-rankAlarmWho')).toHaveText(
    /^rank 0 · explosion · step 26$/
  );
  await expect(alarm.locator('.jp-TorchDbg-rankAlarmRanks')).toHaveText(
    'seen on ranks 0, 1'
  );
  await expect(alarm.locator('.jp-TorchDbg-rankAlarmLayer')).toHaveText(
    /^layer: model\.(encoder\.0|head)$/
  );
  await expect(alarm.locator('.jp-TorchDbg-alertMessage')).toContainText(
    "which rank's batch caused it is not known"
  );
  await sidebarWidth(page, 250);
  expect.soft(await sidewaysScroll(page, NO_SIDEWAYS)).toEqual([]);
  await alarm.scrollIntoViewIfNeeded();
  await alarm.screenshot({
    path: testInfo.outputPath('ranks-explosion-light.png')
  });
  await page.theme.setDarkTheme();
  expect.soft(await sidewaysScroll(page, NO_SIDEWAYS)).toEqual([]);
  await alarm.screenshot({
    path: testInfo.outputPath('ranks-explosion-dark.png')
  });
  await page.theme.setLightTheme();
  await run;
});
