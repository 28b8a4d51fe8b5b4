/**
 * A hang at the collective (#25 part 2, R57), in Chromium with a real kernel:
 * a 2-rank gloo job from the notebook all-reduces a [1024] float32 tensor by
 * hand each step; rank 1 sleeps in its dataset's `__getitem__` at step 10 while
 * rank 0 waits in that all-reduce. With the hang threshold at 3 s the Ranks
 * section's hang alarm names all_reduce with its seq and group, says rank 1
 * never entered it, and lists the two ranks' stacks merged by where each
 * stopped (rank 1's row marked). Readable at a 250 px sidebar: nothing scrolls
 * sideways; screenshots light and dark.
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
  '',
  '',
  'class Data(torch.utils.data.Dataset):',
  '    def __init__(self, rank):',
  '        self.rank = rank',
  '    def __len__(self):',
  '        return 200',
  '    def __getitem__(self, i):',
  '        if self.rank == 1 and i == 40:',
  '            time.sleep(25)  # rank 1 hangs in its data loading',
  '        return torch.full((8,), float(i))',
  '',
  '',
  'def run(rank, world, port):',
  '    os.environ["MASTER_ADDR"] = "127.0.0.1"',
  '    os.environ["MASTER_PORT"] = str(port)',
  '    dist.init_process_group("gloo", rank=rank, world_size=world)',
  '    model = torch.nn.Linear(8, 1)',
  '    opt = torch.optim.SGD(model.parameters(), lr=0.01)',
  '    loader = torch.utils.data.DataLoader(Data(rank), batch_size=4)',
  '    for x in loader:',
  '        model(x).pow(2).mean().backward()',
  '        dist.all_reduce(torch.ones(1024))',
  '        opt.step()',
  '        opt.zero_grad()',
  '        time.sleep(0.05)',
  '    dist.destroy_process_group()',
  ''
].join('\n');

const SETUP = rankWorkerSetup('hang_worker', WORKER, [
  'from jupyterlab_torchdbg.kernel.extension import current',
  'current().ranks.hang_s = 3.0  # sent to each rank in its config'
]);

const LAUNCH = spawnLaunch('hang_worker', '2, PORT');

const NO_SIDEWAYS = [
  PANEL,
  `${PANEL} .jp-TorchDbg-body`,
  `${PANEL} [data-section="ranks"] .jp-TorchDbg-sectionBody`,
  `${PANEL} .jp-TorchDbg-rankAlarms`,
  `${PANEL} .jp-TorchDbg-rankHang`
];

test('a hung rank: the alarm names the collective and the rank that never entered it', async ({
  page
}, testInfo) => {
  test.setTimeout(300000);
  await notebookForRanks(page, 'ranks-hang.ipynb');
  await setSource(page, 0, SETUP);
  await page.notebook.runCell(0, true);
  await setSource(page, 1, LAUNCH);
  const run = page.notebook.runCell(1, true);
  const section = page.locator(`${PANEL} [data-section="ranks"]`);
  await expect(section).toBeVisible({ timeout: 90000 });
  await setSectionOpen(page, 'ranks', true);
  const alarm = section.locator('.jp-TorchDbg-rankAlarm[data-kind="hang"]');
  await expect(alarm).toHaveCount(1, { timeout: 60000 });
  await expect(alarm).toHaveAttribute('data-rank', '1');
  await expect(alarm.locator('.jp-TorchDbg-rankHangCollective')).toHaveText(
    /^rank 0 waits in all_reduce · seq \d+ · default group · \[1024\] float32$/
  );
  await expect(alarm.locator('.jp-TorchDbg-rankHangMissing')).toHaveText(
    'never entered: rank 1'
  );
  const merged = alarm.locator('.jp-TorchDbg-rankMerged li');
  await expect(merged).toHaveCount(2);
  await expect(merged.nth(0)).toContainText('in run');
  await expect(merged.nth(1)).toContainText('in __getitem__');
  await expect(merged.nth(1)).toHaveClass(/jp-mod-missing/);
  await sidebarWidth(page, 250);
  expect.soft(await sidewaysScroll(page, NO_SIDEWAYS)).toEqual([]);
  await alarm.scrollIntoViewIfNeeded();
  await alarm.screenshot({ path: testInfo.outputPath('ranks-hang-light.png') });
  await page.theme.setDarkTheme();
  expect.soft(await sidewaysScroll(page, NO_SIDEWAYS)).toEqual([]);
  await alarm.screenshot({ path: testInfo.outputPath('ranks-hang-dark.png') });
  await page.theme.setLightTheme();
  await run; // rank 1 wakes up and the job ends
});
