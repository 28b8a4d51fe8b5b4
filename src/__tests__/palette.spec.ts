/**
 * @jest-environment jsdom
 *
 * Palette = panel (issue #22): the palette's commands are enabled exactly when
 * the panel's buttons are, because both ask `model/availability.ts`. Each case
 * renders the Training control and Memory sections for one kernel state and
 * compares every button with its command: "Resume Training" is off when
 * nothing is paused, "Empty CUDA Cache" and "Start Recording Memory History"
 * are off on a CPU-only kernel, Reset LR works after the run, the LR commands
 * exist, a rank job points to the all-rank controls; the toggle shortcut's
 * command hides a shown panel and shows a hidden one.
 */
import { act, mountEach, React } from './dom';
import { CommandRegistry } from '@lumino/commands';
import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { Widget } from '@lumino/widgets';

import type { TorchDbgConnection } from '../connection/connection';
import type { KernelTracker } from '../connection/tracker';
import { availability } from '../model/availability';
import { TorchDbgModel } from '../model/model';
import type { IRanks } from '../protocol/generated';
import type { IAck, IMemory } from '../protocol/messages';
import { hello } from './fakeKernel';
import { controlState, controlTarget } from './fixtures';
import { schemaDef } from './schema';
import { trans } from './translate';

jest.mock('@jupyterlab/apputils', () => ({
  Notification: {
    info: jest.fn(),
    error: jest.fn(),
    warning: jest.fn(),
    success: jest.fn()
  },
  InputDialog: { getNumber: jest.fn() },
  Dialog: { okButton: jest.fn(), cancelButton: jest.fn() },
  showDialog: jest.fn()
}));

// @lumino/widgets (the Set LR dialog's body) reads DragEvent when it loads
Object.assign(globalThis, {
  DragEvent: (globalThis as { DragEvent?: unknown }).DragEvent ?? class {}
});

/* eslint-disable @typescript-eslint/no-require-imports */
const { ControlPanel } = require('../panels/control/body');
const { MemoryPanel } = require('../panels/memory/body');
const {
  addControlCommands,
  addMemoryCommands,
  addPanelCommands,
  CommandIDs
} = require('../commands');
/* eslint-enable @typescript-eslint/no-require-imports */

const memoryMessage = schemaDef('Memory');
const ranksMessage = schemaDef('Ranks');

const MiB = 1024 * 1024;

function memory(over: Partial<IMemory> = {}): IMemory {
  const msg: IMemory = {
    method: 'memory',
    time: 1718000001,
    state: 'no_cuda',
    reason: 'no CUDA device: this torch build is CPU-only',
    devices: [],
    host: { rss: 512 * MiB, reason: null, series: 'mem/cpu/rss' },
    breakdown: null,
    recording: { state: 'off', max_entries: null, since: null, last: null },
    last_oom: null,
    nvml: { available: false, reason: 'NVML library not found' },
    ...over
  };
  expect(memoryMessage(msg)).toBe(true);
  return msg;
}

/** A running 2-rank job (the kernel's own loop is idle meanwhile). */
function rankJob(): IRanks {
  const rank = (r: number) => ({
    rank: r,
    identity: {
      rank: r,
      world_size: 2,
      local_rank: r,
      host: 'node-a',
      pid: 1000 + r,
      launcher: 'spawn'
    },
    state: 'running' as const,
    step: 40,
    step_time_s: 0.0125,
    own_time_s: 0.004,
    grad_norm: 0.75,
    grad_step: 40,
    memory_bytes: 12 * MiB,
    memory_kind: 'host' as const,
    last_seen_s: 0.1,
    since_step_s: 0.01,
    clip: null,
    lr_scale: 1,
    phase: 'user' as const
  });
  return {
    method: 'ranks',
    replay: false,
    job: {
      id: 1,
      started: 1_700_000_000,
      world_size: 2,
      state: 'running',
      transport: 'ipc',
      paused_at: null,
      pending: null
    },
    ranks: [rank(0), rank(1)],
    points: [],
    alarms: [],
    endpoint: { transport: 'ipc', refused: 0 }
  } as IRanks;
}

function setup() {
  const model = new TorchDbgModel();
  model.hello = hello() as unknown as TorchDbgModel['hello'];
  model.state = { kind: 'connected' };
  const conn = {
    model,
    sendAction: (action: string) =>
      Promise.resolve({
        method: 'ack',
        request_id: 'r',
        action,
        result: {}
      } as IAck)
  } as unknown as TorchDbgConnection;
  const commands = new CommandRegistry();
  const shown = { visible: false };
  const activated: string[] = [];
  const collapsed: number[] = [];
  const ctx = {
    app: {
      commands,
      shell: { activateById: (id: string) => activated.push(id) }
    } as unknown as JupyterFrontEnd,
    tracker: {
      current: conn,
      currentWidget: null,
      currentLabel: 'nb.ipynb'
    } as unknown as KernelTracker,
    trans
  };
  addControlCommands(ctx);
  addMemoryCommands(ctx);
  const sidebar = {
    id: 'jp-torchdbg-sidebar',
    get isVisible() {
      return shown.visible;
    }
  } as unknown as Widget;
  addPanelCommands(ctx, {
    sidebar,
    icon: undefined,
    collapseRight: () => collapsed.push(1)
  });
  return { model, conn, commands, shown, activated, collapsed };
}

const dom = mountEach();

function render(conn: TorchDbgConnection): void {
  dom.render(
    React.createElement(
      'div',
      null,
      React.createElement(ControlPanel, { conn, trans }),
      React.createElement(MemoryPanel, { model: conn.model, conn, trans })
    )
  );
}

async function update(fn: () => void): Promise<void> {
  await act(async () => {
    fn();
    await new Promise(resolve => requestAnimationFrame(resolve));
  });
}

/** A panel button by its text: enabled only when shown and not disabled. */
function panelEnabled(label: string): boolean {
  const b = Array.from(dom.host.querySelectorAll('button')).find(
    x => x.textContent === label
  );
  return !!b && !b.disabled;
}

/** The learning-rate field takes a value (what Set LR needs). */
function lrFieldEnabled(): boolean {
  const input = dom.host.querySelector<HTMLInputElement>(
    '.jp-TorchDbg-lrInput'
  );
  return !!input && !input.disabled;
}

/** Each command and the panel control that does the same. */
const PAIRS: [string, () => boolean][] = [
  ['torchdbg:clip', () => panelEnabled('Clip')],
  ['torchdbg:pause', () => panelEnabled('Pause')],
  ['torchdbg:resume', () => panelEnabled('Resume')],
  ['torchdbg:step', () => panelEnabled('Step')],
  ['torchdbg:unclip', () => panelEnabled('Stop clipping')],
  ['torchdbg:halve-lr', () => panelEnabled('LR ×0.5')],
  ['torchdbg:set-lr', lrFieldEnabled],
  ['torchdbg:reset-lr', () => panelEnabled('Reset LR')],
  ['torchdbg:empty-cache', () => panelEnabled('Empty cache')],
  ['torchdbg:release-references', () => panelEnabled('Release references')],
  [
    'torchdbg:record-memory',
    () => panelEnabled('Record history') || panelEnabled('Stop recording')
  ],
  ['torchdbg:save-checkpoint', () => panelEnabled('Save checkpoint')]
];

/** Every command against its panel control: [id, command, panel] where they differ. */
function mismatches(commands: CommandRegistry): string[] {
  return PAIRS.filter(([id, panel]) => commands.isEnabled(id) !== panel()).map(
    ([id, panel]) =>
      `${id}: palette ${commands.isEnabled(id)}, panel ${panel()}`
  );
}

describe('palette = panel: one answer to "can this action run now"', () => {
  it('registers the LR commands and the toggle with palette labels', () => {
    const { commands } = setup();
    expect(commands.label(CommandIDs.halveLr)).toBe(
      'Halve the Learning Rate (LR ×0.5)'
    );
    expect(commands.label(CommandIDs.setLr)).toBe('Set the Learning Rate…');
    expect(commands.label(CommandIDs.resetLr)).toBe(
      'Reset the Learning Rate (Reset LR)'
    );
    expect(commands.label(CommandIDs.toggle)).toBe('Toggle Panel');
    expect(commands.label(CommandIDs.open)).toBe('Open Panel');
  });

  it('running, nothing paused, CPU only: Resume and the CUDA actions are off in both', async () => {
    const { model, conn, commands } = setup();
    model.control.apply(controlState());
    model.memory.apply(memory());
    render(conn);
    expect(mismatches(commands)).toEqual([]);
    expect(commands.isEnabled(CommandIDs.pause)).toBe(true);
    expect(commands.isEnabled(CommandIDs.resume)).toBe(false);
    expect(commands.isEnabled(CommandIDs.step)).toBe(false);
    expect(commands.isEnabled(CommandIDs.emptyCache)).toBe(false);
    expect(commands.isEnabled(CommandIDs.recordMemory)).toBe(false);
    expect(commands.caption(CommandIDs.emptyCache)).toBe(
      'Needs CUDA in use by this kernel.'
    );
    expect(commands.caption(CommandIDs.resume)).toBe('Nothing is paused.');
    expect(commands.isEnabled(CommandIDs.halveLr)).toBe(true);
    expect(commands.isEnabled(CommandIDs.setLr)).toBe(true);
    expect(commands.isEnabled(CommandIDs.resetLr)).toBe(false);
  });

  it('paused, clipping, CUDA in use and recording: Resume, Step, Stop clipping on in both', async () => {
    const { model, conn, commands } = setup();
    model.control.apply(controlState({ paused: true, paused_at: 12, clip: 1 }));
    model.memory.apply(
      memory({
        state: 'active',
        reason: null,
        recording: { state: 'on', max_entries: 1000, since: 1, last: null }
      })
    );
    render(conn);
    expect(mismatches(commands)).toEqual([]);
    expect(commands.isEnabled(CommandIDs.resume)).toBe(true);
    expect(commands.isEnabled(CommandIDs.step)).toBe(true);
    expect(commands.isEnabled(CommandIDs.pause)).toBe(false);
    expect(commands.isEnabled(CommandIDs.unclip)).toBe(true);
    expect(commands.isEnabled(CommandIDs.emptyCache)).toBe(true);
    expect(commands.label(CommandIDs.recordMemory)).toBe(
      'Stop Recording Memory History'
    );
  });

  it('after the run the LR changed: Reset LR on in both, LR ×0.5 and Set off', async () => {
    const { model, conn, commands } = setup();
    model.control.apply(controlState());
    render(conn);
    await update(() =>
      model.control.apply(
        controlState({
          idle: true,
          lr_scale: 0.5,
          targets: [
            controlTarget({
              stepping: false,
              groups: [{ index: 0, lr: 0.25, initial_lr: 0.5, changed: true }]
            })
          ]
        })
      )
    );
    expect(mismatches(commands)).toEqual([]);
    expect(commands.isEnabled(CommandIDs.resetLr)).toBe(true);
    expect(commands.isEnabled(CommandIDs.halveLr)).toBe(false);
    expect(commands.isEnabled(CommandIDs.setLr)).toBe(false);
    expect(commands.caption(CommandIDs.halveLr)).toContain(
      'Idle: nothing is training'
    );
  });

  it('a loop without torch.optim: no LR command, as no LR control', async () => {
    const { model, conn, commands } = setup();
    model.control.apply(
      controlState({
        targets: [
          controlTarget({
            key: 'net#2',
            name: 'net',
            by_hand: true,
            groups: []
          })
        ],
        target: 'net#2'
      })
    );
    render(conn);
    expect(mismatches(commands)).toEqual([]);
    expect(commands.isEnabled(CommandIDs.halveLr)).toBe(false);
    expect(commands.isEnabled(CommandIDs.resetLr)).toBe(false);
    expect(commands.caption(CommandIDs.halveLr)).toContain(
      'A loop without torch.optim'
    );
  });

  it('a rank job runs: Training control says so and points to Ranks; Pause says why', async () => {
    const { model, conn, commands } = setup();
    model.control.apply(controlState({ idle: true, run: null, targets: [] }));
    const job = rankJob();
    expect(ranksMessage(job)).toBe(true);
    model.ranks.apply(job);
    render(conn);
    expect(mismatches(commands)).toEqual([]);
    const text = dom.host.querySelector(
      '.jp-TorchDbg-controlStateText'
    )!.textContent;
    expect(text).toBe(
      'A 2-rank job is running: use the all-rank controls in Ranks.'
    );
    expect(text).not.toContain('Idle');
    expect(panelEnabled('Go to Ranks')).toBe(true);
    expect(commands.isEnabled(CommandIDs.pause)).toBe(false);
    expect(commands.caption(CommandIDs.pause)).toBe(text);
    // the kernel's own clip would not reach the ranks
    expect(commands.isEnabled(CommandIDs.clip)).toBe(false);
    expect(panelEnabled('Clip')).toBe(false);
    // the job ends: the control section is plainly idle again
    await update(() =>
      model.ranks.apply({
        ...job,
        job: { ...job.job!, state: 'ended' },
        ranks: job.ranks.map(r => ({ ...r, state: 'exited' as const }))
      })
    );
    expect(
      dom.host.querySelector('.jp-TorchDbg-controlStateText')!.textContent
    ).toBe('Idle: nothing is training.');
  });

  it('not connected: every command off (and the panel shows no buttons)', () => {
    const { model, commands } = setup();
    model.control.apply(controlState({ paused: true, paused_at: 3 }));
    model.state = { kind: 'not_loaded', reason: 'unloaded' };
    expect(commands.isEnabled(CommandIDs.resume)).toBe(false);
    expect(availability(model, trans).resume.why).toBe(
      'The kernel side is not connected.'
    );
  });
});

describe('Ctrl+Shift+Y toggles the panel', () => {
  it('shows a hidden panel and hides a shown one', async () => {
    const { commands, shown, activated, collapsed } = setup();
    await commands.execute(CommandIDs.toggle);
    expect(activated).toEqual(['jp-torchdbg-sidebar']);
    expect(collapsed).toEqual([]);
    shown.visible = true;
    expect(commands.isToggled(CommandIDs.toggle)).toBe(true);
    await commands.execute(CommandIDs.toggle);
    expect(collapsed).toEqual([1]);
    expect(activated).toHaveLength(1);
  });
});
