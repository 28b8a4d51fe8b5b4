/**
 * @jest-environment jsdom
 *
 * Live counters (issue #22, item 1): the step, the alarm count and the figures
 * of the Now strip, the status bar, the runs bar and the Gradients header
 * follow the stream while a run trains, not only `control` (sent when a
 * control changes) nor the `runs`/`grads` status of every 2 s. The newest of
 * the messages that carry a count wins; a count of another run never leaks.
 * During a rank job the job's alarms count in the Now strip and the status
 * bar (item 8). Every kernel message is checked against the schema first.
 */
import { act, fakeIntersectionObserver, mountEach, React } from './dom';
import { TorchDbgModel } from '../model/model';
import type { IRankAlarm, IRanks, IRunInfo } from '../protocol/generated';
import type {
  IAlertItem,
  IControl,
  IGrads,
  IGradTrack
} from '../protocol/messages';
import type * as NowStripT from '../sidebar/nowStrip';
import type * as RunsBarT from '../panels/runs/bar';
import type * as StatusT from '../statusLine';
import type * as LiveCountsT from '../sidebar/liveCounts';
import { encodeBlock } from './fakeKernel';
import { deliver, gradTrack } from './fixtures';
import { trans } from './translate';
import { formatCompact } from '../ui/formatCompact';

fakeIntersectionObserver();

/* eslint-disable @typescript-eslint/no-require-imports */
const {
  NowStrip,
  nowFigures
}: typeof NowStripT = require('../sidebar/nowStrip');
const { RunsBar }: typeof RunsBarT = require('../panels/runs/bar');
const { statusLine }: typeof StatusT = require('../statusLine');
const {
  runAlarms,
  runStep
}: typeof LiveCountsT = require('../sidebar/liveCounts');
/* eslint-enable @typescript-eslint/no-require-imports */

function runInfo(id: number, over: Partial<IRunInfo> = {}): IRunInfo {
  return {
    id,
    start: 1718000000 + id,
    end: null,
    reason: id === 1 ? 'first' : 'idle',
    cell_id: 'c1',
    execution_count: 2 + id,
    optimizers: ['opt'],
    steps: 0,
    alerts: 0,
    ...over
  };
}

function control(over: Partial<IControl> = {}): IControl {
  return {
    method: 'control',
    clip: null,
    paused: false,
    paused_at: null,
    step: 0,
    lr_scale: null,
    optimizers: ['opt'],
    last_refusal: null,
    idle: false,
    run: 2,
    ...over
  };
}

function grads(tracks: IGradTrack[]): IGrads {
  return {
    method: 'grads',
    state: 'active',
    reason: null,
    mode: 'auto',
    stride: 1,
    budget: 0.01,
    thresholds: {
      explode_abs: null,
      explode_factor: 10,
      explode_warmup: 5,
      vanish_floor: 1e-8,
      vanish_ratio: 1e-5,
      vanish_steps: 50,
      amp_skips: 10,
      amp_min_scale: 1
    },
    alerts: 0,
    tracks
  };
}

let seq = 0;

/**
 * One flush of run `run`: the track's block (total norm) and the logged loss,
 * at steps `xs`; block ids are announced with their names the first time.
 */
function flush(model: TorchDbgModel, run: number, xs: number[]): void {
  const grad = encodeBlock(xs, [xs.map(x => 10 / x)]);
  const loss = encodeBlock(xs, [xs.map(x => 1 / x)]);
  const first = model.names.get(10 * run) === undefined;
  deliver(
    model,
    {
      method: 'series',
      seq: ++seq,
      blocks: [
        first
          ? { id: 10 * run, names: ['grad/opt/total'], count: xs.length, run }
          : { id: 10 * run, count: xs.length },
        first
          ? { id: 10 * run + 1, names: ['loss'], count: xs.length, run }
          : { id: 10 * run + 1, count: xs.length }
      ]
    },
    [grad.x, grad.y, loss.x, loss.y]
  );
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

function alert(id: string, run: number, step: number): IAlertItem {
  return {
    id,
    source: 'grads',
    kind: 'explosion',
    severity: 'warning',
    step,
    layer: 'model.fc',
    message: `norm exploded at step ${step}`,
    remedy: 'lower the learning rate',
    track: 'opt',
    value: 1e9,
    time: 1718000100 + step,
    run
  };
}

/**
 * A kernel in run 2 (run 1 ended at 40 steps) as the panel sees it after the
 * run's first second: `runs` said 10 steps, `control` 6 (its last change),
 * the track's status 8, and the stream has steps 1..12.
 */
function training(): TorchDbgModel {
  seq = 0;
  const m = new TorchDbgModel();
  deliver(m, {
    method: 'runs',
    current: 2,
    runs: [
      runInfo(1, { end: 1718000030, steps: 40 }),
      runInfo(2, { steps: 10 })
    ]
  });
  deliver(m, control({ step: 6 }));
  deliver(m, grads([gradTrack('opt', { run: 2, step: 8 })]));
  flush(m, 2, range(1, 12));
  return m;
}

describe('live counters: the freshest count of the run', () => {
  it('the step follows each flush of the stream, not the last control message', () => {
    const m = training();
    expect(nowFigures(m).step).toBe(12);
    expect(statusLine(m, trans).text).toBe('Torch: step 12');
    expect(runStep(m, 2)).toBe(12);
    flush(m, 2, range(13, 57));
    expect(nowFigures(m).step).toBe(57);
    expect(statusLine(m, trans).text).toBe('Torch: step 57');
    // the 2-s messages are ahead of the stream's last sampled step: they win
    deliver(m, {
      method: 'runs',
      current: 2,
      runs: [
        runInfo(1, { end: 1718000030, steps: 40 }),
        runInfo(2, { steps: 60 })
      ]
    });
    expect(nowFigures(m).step).toBe(60);
    deliver(m, grads([gradTrack('opt', { run: 2, step: 64 })]));
    expect(nowFigures(m).step).toBe(64);
    // the figures are the run's newest too
    expect(nowFigures(m).loss).toEqual({
      name: 'loss',
      value: Math.fround(1 / 57)
    });
    expect(nowFigures(m).grad).toEqual({
      track: 'opt',
      value: Math.fround(10 / 57)
    });
  });

  it('never takes a count of another run', () => {
    const m = training();
    // control still speaks of run 1 (its 40 steps): not run 2's step
    deliver(m, control({ step: 40, run: 1 }));
    expect(nowFigures(m).step).toBe(12);
    expect(runStep(m, 1)).toBe(40);
  });

  it('a run of log() only after a stepping run: not the stepping run’s count', () => {
    const m = training();
    flush(m, 2, range(13, 160));
    // run 3 only logs: control names it but its step is still run 2's (160)
    deliver(m, {
      method: 'runs',
      current: 3,
      runs: [
        runInfo(2, { end: 1718000060, steps: 160 }),
        runInfo(3, { steps: 0, optimizers: [] })
      ]
    });
    deliver(m, control({ step: 160, run: 3, idle: true }));
    const loss = encodeBlock([1, 2, 3], [[3, 2, 1]]);
    deliver(
      m,
      {
        method: 'series',
        seq: ++seq,
        blocks: [{ id: 31, names: ['loss'], count: 3, run: 3 }]
      },
      [loss.x, loss.y]
    );
    expect(nowFigures(m).run).toBe(3);
    expect(nowFigures(m).step).toBe(3);
    expect(runStep(m, 3)).toBeNull();
    // the ended run keeps its own count
    expect(runStep(m, 2)).toBe(160);
  });

  it('follows the current run while the user looks at an earlier one', () => {
    const m = training();
    flush(m, 1, range(1, 40)); // run 1's points (a snapshot, say)
    m.runs.pick(1);
    expect(m.runs.shown).toBe(1);
    flush(m, 2, range(13, 30));
    const f = nowFigures(m);
    expect(f.run).toBe(2);
    expect(f.step).toBe(30);
    expect(f.loss!.value).toBeCloseTo(1 / 30, 6);
    // run 2 ended: the strip stays on the newest run, not the one picked
    deliver(m, {
      method: 'runs',
      current: null,
      runs: [
        runInfo(1, { end: 1718000030, steps: 40 }),
        runInfo(2, { end: 1718000060, steps: 30 })
      ]
    });
    expect(m.runs.shown).toBe(1);
    expect(nowFigures(m).step).toBe(30);
    expect(nowFigures(m).loss!.value).toBeCloseTo(1 / 30, 6);
  });

  it('counts alarms as the larger of those held and the kernel’s count', () => {
    const m = training();
    deliver(m, { method: 'alert', alerts: [alert('a1', 2, 5)] });
    expect(runAlarms(m, 2)).toBe(1);
    expect(nowFigures(m).alarms).toBe(1);
    // the kernel raised 3 (two not sent yet: at most 2 alert messages a second)
    deliver(m, {
      method: 'runs',
      current: 2,
      runs: [runInfo(2, { steps: 20, alerts: 3 })]
    });
    expect(nowFigures(m).alarms).toBe(3);
    expect(statusLine(m, trans).text).toBe('Torch: step 20 · 3 alarms');
    // an earlier run's alarms are not this run's
    deliver(m, { method: 'alert', alerts: [alert('b1', 1, 9)] });
    expect(nowFigures(m).alarms).toBe(3);
  });
});

function rankAlarm(over: Partial<IRankAlarm> = {}): IRankAlarm {
  return {
    id: 'h1',
    kind: 'hang',
    rank: 1,
    step: 30,
    time: 1718000200,
    message:
      'rank 1 has not stepped for 12 s while rank 0 waits in a collective',
    stack: [],
    ...over
  };
}

function ranksMessage(
  alarms: IRankAlarm[],
  state: 'running' | 'ended' = 'running'
): IRanks {
  const rank = (r: number) => ({
    rank: r,
    identity: {
      rank: r,
      world_size: 2,
      local_rank: r,
      host: 'node-a',
      pid: 1000 + r,
      launcher: 'spawn' as const
    },
    state: 'running' as const,
    step: 30,
    step_time_s: 0.01,
    own_time_s: 0.004,
    grad_norm: 0.5,
    grad_step: 30,
    memory_bytes: 1024,
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
      started: 1718000000,
      world_size: 2,
      state,
      transport: 'ipc',
      paused_at: null,
      pending: null
    },
    ranks: [rank(0), rank(1)],
    points: [],
    alarms,
    endpoint: { transport: 'ipc', refused: 0 }
  };
}

describe('rendered: the Now strip, the status bar and the runs bar move with the stream', () => {
  const dom = mountEach();

  /** Let the live clock tick (at most every 200 ms) and its frame run. */
  async function tick(): Promise<void> {
    await act(async () => {
      await new Promise(resolve => setTimeout(resolve, 300));
    });
  }

  const text = (sel: string) =>
    dom.host.querySelector(sel)?.textContent ?? null;

  it('shows each flush’s step in the strip and the runs bar while the run trains', async () => {
    const m = training();
    dom.render(
      React.createElement(
        React.Fragment,
        null,
        React.createElement(NowStrip, {
          model: m,
          trans,
          onShowAlarms: () => undefined
        }),
        React.createElement(RunsBar, { model: m, trans })
      )
    );
    const step = '.jp-TorchDbg-nowStep .jp-TorchDbg-nowValue';
    const picked = () =>
      (dom.host.querySelector('.jp-TorchDbg-runPick') as HTMLSelectElement)
        .selectedOptions[0].textContent;
    expect(text(step)).toBe('12');
    expect(picked()).toBe('Run 2 · In[4] · 12 steps');
    for (const to of [25, 80, 133]) {
      flush(m, 2, range(to - 10, to));
      await tick();
      expect(text(step)).toBe(String(to));
      expect(picked()).toBe(`Run 2 · In[4] · ${to} steps`);
    }
    expect(text('.jp-TorchDbg-nowLoss .jp-TorchDbg-nowValue')).toBe(
      formatCompact(Math.fround(1 / 133), 2)
    );
  });

  it('counts a rank job’s hang alarm while the kernel’s own run trains (item 8)', async () => {
    const m = training();
    const shown: string[] = [];
    dom.render(
      React.createElement(NowStrip, {
        model: m,
        trans,
        onShowAlarms: () => shown.push('grads'),
        onShowRankAlarms: () => shown.push('ranks')
      })
    );
    deliver(m, ranksMessage([rankAlarm()]));
    await tick();
    const button = dom.host.querySelector<HTMLButtonElement>(
      '.jp-TorchDbg-nowAlarms'
    )!;
    expect(button.textContent).toBe('1 alarm');
    expect(button.disabled).toBe(false);
    await act(async () => button.click());
    expect(shown).toEqual(['ranks']);
    expect(statusLine(m, trans).text).toBe('Torch: step 12 · 1 alarm');
    // the kernel's own alarm too: both counted, the click shows the run's list
    deliver(m, { method: 'alert', alerts: [alert('a1', 2, 5)] });
    await tick();
    expect(button.textContent).toBe('2 alarms');
    await act(async () => button.click());
    expect(shown).toEqual(['ranks', 'grads']);
    // the job ended: its alarms are the Ranks section's history, not now
    deliver(m, ranksMessage([rankAlarm()], 'ended'));
    await tick();
    expect(button.textContent).toBe('1 alarm');
  });

  it('while only the job trains (the kernel idle): the job’s step and its alarms', async () => {
    seq = 0;
    const m = new TorchDbgModel();
    deliver(m, control({ step: 0, idle: true, run: null }));
    deliver(m, ranksMessage([rankAlarm()]));
    expect(nowFigures(m).ranks).toEqual({ size: 2, step: 30, alarms: 1 });
    expect(statusLine(m, trans).text).toBe(
      'Torch: 2 ranks · step 30 · 1 alarm'
    );
  });
});
