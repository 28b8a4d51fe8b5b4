/**
 * Runs kept apart in the browser (protocol 2.3): stream blocks stored per run,
 * `model.series` as the shown run's, at most MAX_RUNS runs held, the picker's
 * choice, the faded overlays' data, and the gradient tracks and alarms per run.
 * Every message is checked against the protocol schema first.
 */
import { TorchDbgModel } from '../model/model';
import { MAX_RUNS, NO_RUN } from '../panels/runs/model';
import { pickableRuns, runLabel, runTitle } from '../panels/runs/bar';
import type { IRunInfo, IRuns } from '../protocol/generated';
import {
  IAlert,
  IGrads,
  IGradTrack,
  ISeries,
  ISnapshot
} from '../protocol/messages';
import { encodeBlock } from './fakeKernel';
import { trans } from './translate';
import { deliver, gradTrack } from './fixtures';

/** Route a kernel message after checking it against the schema. */
function run(id: number, over: Partial<IRunInfo> = {}): IRunInfo {
  return {
    id,
    start: 1718000000 + id,
    end: 1718000010 + id,
    reason: id === 1 ? 'first' : 'idle',
    cell_id: 'c1',
    execution_count: id + 4,
    optimizers: ['opt'],
    steps: 10 * id,
    alerts: 0,
    ...over
  };
}

function runs(current: number | null, ids: number[]): IRuns {
  return {
    method: 'runs',
    current,
    runs: ids.map(id => run(id, id === current ? { end: null } : {}))
  };
}

let seq = 0;

/** A `series` message: one block per entry, ids announced with names and run. */
function series(
  blocks: {
    id: number;
    names?: string[];
    run?: number;
    xs: number[];
    ys: number[][];
  }[]
): [ISeries, ArrayBuffer[]] {
  const buffers: ArrayBuffer[] = [];
  const msg: ISeries = {
    method: 'series',
    seq: ++seq,
    blocks: blocks.map(b => {
      const { x, y } = encodeBlock(b.xs, b.ys);
      buffers.push(x, y);
      return {
        id: b.id,
        count: b.xs.length,
        ...(b.names ? { names: b.names } : {}),
        ...(b.run !== undefined ? { run: b.run } : {})
      };
    })
  };
  return [msg, buffers];
}

function feed(model: TorchDbgModel, ...args: Parameters<typeof series>): void {
  const [msg, buffers] = series(...args);
  deliver(model, msg, buffers);
}

const ys = (m: TorchDbgModel, name: string) =>
  Array.from(m.series.get(name)?.toArrays().y ?? []);
const xs = (m: TorchDbgModel, name: string) =>
  Array.from(m.series.get(name)?.toArrays().x ?? []);

beforeEach(() => {
  seq = 0;
});

describe('runs: per-run storage', () => {
  it('stores each run under its own blocks; series is the current run, restarting its steps', () => {
    const m = new TorchDbgModel({ capacity: 100 });
    deliver(m, runs(1, [1]));
    feed(m, [
      { id: 1, names: ['loss'], run: 1, xs: [1, 2, 3], ys: [[9, 8, 7]] }
    ]);
    expect(xs(m, 'loss')).toEqual([1, 2, 3]);
    // the cell is run again: run 2, the loss under a new block id, steps from 1
    deliver(m, runs(2, [1, 2]));
    feed(m, [{ id: 2, names: ['loss'], run: 2, xs: [1, 2], ys: [[5, 4]] }]);
    expect(m.runs.shown).toBe(2);
    expect(xs(m, 'loss')).toEqual([1, 2]);
    expect(ys(m, 'loss')).toEqual([5, 4]);
    // later points of run 2 by id alone (no names, no run on the block)
    feed(m, [{ id: 2, xs: [3], ys: [[3]] }]);
    expect(ys(m, 'loss')).toEqual([5, 4, 3]);
    // run 1 is untouched, and reachable as an earlier run
    expect(Array.from(m.seriesOfRun(1).get('loss')!.toArrays().y)).toEqual([
      9, 8, 7
    ]);
    expect(m.earlierSeries('loss').map(s => s.run)).toEqual([1]);
    expect(m.runs.stored).toEqual([1, 2]);
  });

  it('blocks without a run go to run 0 and fill in names the shown run lacks', () => {
    const m = new TorchDbgModel({ capacity: 100 });
    feed(m, [
      { id: 1, names: ['mem/cpu/rss'], xs: [100, 101], ys: [[1, 2]] },
      { id: 2, names: ['loss'], run: 3, xs: [1], ys: [[0.5]] }
    ]);
    deliver(m, runs(3, [3]));
    expect(m.runs.shown).toBe(3);
    expect([...m.series.keys()]).toEqual(['loss', 'mem/cpu/rss']);
    expect(m.seriesOfRun(NO_RUN).get('mem/cpu/rss')!.length).toBe(2);
    expect(m.seriesOfRun(3).has('mem/cpu/rss')).toBe(false);
  });

  it('a kernel without runs: everything is run 0 and shown as before', () => {
    const m = new TorchDbgModel({ capacity: 100 });
    feed(m, [{ id: 1, names: ['loss'], xs: [0, 1], ys: [[1, 2]] }]);
    expect(m.runs.shown).toBe(NO_RUN);
    expect(ys(m, 'loss')).toEqual([1, 2]);
    expect(pickableRuns(m)).toEqual([]);
  });

  it(`keeps at most the last ${MAX_RUNS} runs' points`, () => {
    const m = new TorchDbgModel({ capacity: 100 });
    feed(m, [{ id: 100, names: ['mem/cpu/rss'], xs: [1], ys: [[1]] }]);
    for (let r = 1; r <= MAX_RUNS + 2; r++) {
      deliver(
        m,
        runs(
          r,
          Array.from({ length: r }, (_, i) => i + 1)
        )
      );
      feed(m, [{ id: r, names: ['loss'], run: r, xs: [1, 2], ys: [[r, r]] }]);
    }
    expect(m.runs.stored).toEqual([3, 4, 5, 6, 7]);
    expect(m.seriesOfRun(1).size).toBe(0);
    expect(m.seriesOfRun(2).size).toBe(0);
    // late points of a forgotten run are dropped, not revived
    feed(m, [{ id: 1, xs: [3], ys: [[1]] }]);
    expect(m.runs.stored).toEqual([3, 4, 5, 6, 7]);
    expect(ys(m, 'loss')).toEqual([7, 7]);
    // memory (outside runs) is never forgotten with the runs
    expect(m.series.get('mem/cpu/rss')!.length).toBe(1);
    // the picker offers at most MAX_RUNS runs, newest first
    expect(pickableRuns(m)).toEqual([7, 6, 5, 4, 3]);
    // a picked run that is then forgotten: the panel follows the current run again
    m.runs.pick(3);
    expect(m.runs.shown).toBe(3);
    deliver(m, runs(8, [1, 2, 3, 4, 5, 6, 7, 8]));
    feed(m, [{ id: 8, names: ['loss'], run: 8, xs: [1], ys: [[8]] }]);
    expect(m.runs.stored).toEqual([4, 5, 6, 7, 8]);
    expect(m.runs.picked).toBeNull();
    expect(m.runs.shown).toBe(8);
  });

  it('a snapshot rebuilds every run from the blocks it carries (a reloaded panel)', () => {
    const m = new TorchDbgModel({ capacity: 100 });
    const a = encodeBlock([1, 2], [[1, 2]]);
    const b = encodeBlock([1], [[3]]);
    const snap: ISnapshot = {
      method: 'snapshot',
      seq: 5,
      blocks: [
        { id: 7, names: ['loss'], count: 2, run: 1 },
        { id: 8, names: ['loss'], count: 1, run: 2 }
      ],
      stats: { messages: 5, points: 3, errors: {} }
    };
    deliver(m, snap, [a.x, a.y, b.x, b.y]);
    deliver(m, runs(null, [1, 2]));
    // idle: the newest run is shown
    expect(m.runs.current).toBeNull();
    expect(m.runs.shown).toBe(2);
    expect(ys(m, 'loss')).toEqual([3]);
    expect(m.runs.stored).toEqual([1, 2]);
  });
});

describe('runs: the picker and the overlays', () => {
  function twoRuns(): TorchDbgModel {
    const m = new TorchDbgModel({ capacity: 100 });
    deliver(m, runs(1, [1]));
    feed(m, [{ id: 1, names: ['loss'], run: 1, xs: [1, 2], ys: [[4, 3]] }]);
    deliver(m, runs(2, [1, 2]));
    feed(m, [{ id: 2, names: ['loss'], run: 2, xs: [1], ys: [[2]] }]);
    return m;
  }

  it('picking an earlier run shows its series; picking the current one follows again', () => {
    const m = twoRuns();
    let ticks = 0;
    m.dataChanged.connect(() => ticks++);
    m.runs.pick(1);
    expect(m.runs.shown).toBe(1);
    expect(ys(m, 'loss')).toEqual([4, 3]);
    expect(ticks).toBe(1); // the charts redraw with the picked run
    // a third run starts: the pick holds
    deliver(m, runs(3, [1, 2, 3]));
    expect(m.runs.shown).toBe(1);
    // choosing the current run means "follow the current run"
    m.runs.pick(3);
    expect(m.runs.picked).toBeNull();
    expect(m.runs.shown).toBe(3);
    deliver(m, runs(4, [1, 2, 3, 4]));
    expect(m.runs.shown).toBe(4);
  });

  it('overlay data: none by default, earlier runs when faded, one run to compare', () => {
    const m = twoRuns();
    expect(m.overlayData('loss')).toEqual([]);
    m.runs.faded = true;
    const faded = m.overlayData('loss');
    expect(faded.map(o => o.label)).toEqual(['run 1']);
    expect(faded[0].compare).toBe(false);
    expect(Array.from(faded[0].x)).toEqual([1, 2]);
    expect(Array.from(faded[0].y)).toEqual([4, 3]);
    // the same array while nothing in it changed (a chart rebuilds only then)
    expect(m.overlayData('loss')).toBe(faded);
    m.runs.faded = false;
    expect(m.overlayData('loss')).toEqual([]);
    // compare: the shown run is an earlier one, compared with the current
    m.runs.pick(1);
    m.runs.compare = 2;
    expect(m.overlayData('loss').map(o => o.label)).toEqual(['run 2']);
    // (marked: the chart keeps it whole in its range and names it in its legend)
    expect(m.overlayData('loss')[0].compare).toBe(true);
    // the compared run's new points make a new overlay
    const before = m.overlayData('loss');
    feed(m, [{ id: 2, xs: [2], ys: [[1]] }]);
    const after = m.overlayData('loss');
    expect(after).not.toBe(before);
    expect(Array.from(after[0].y)).toEqual([2, 1]);
    // a series an earlier run did not log has no overlay
    expect(m.overlayData('acc')).toEqual([]);
  });

  it('labels a run as the picker shows it', () => {
    const m = twoRuns();
    expect(runLabel(2, m.runs.info(2), trans)).toBe('Run 2 · In[6] · 20 steps');
    // the alarms only in the title: the line fits a 250 px sidebar
    expect(runLabel(1, m.runs.info(1), trans)).toBe('Run 1 · In[5] · 10 steps');
    expect(runTitle(2, m.runs.info(2), 0, trans)).toBe(
      'Run 2 · In[6] · 20 steps'
    );
    expect(runTitle(1, m.runs.info(1), 3, trans)).toBe(
      'Run 1 · In[5] · 10 steps · 3 alarms'
    );
    expect(runTitle(9, undefined, 1, trans)).toBe('Run 9 · 1 alarm');
    expect(pickableRuns(m)).toEqual([2, 1]);
    // a loop that only logs has no step boundaries: not "0 steps"
    const logOnly = { ...m.runs.info(2)!, steps: 0, optimizers: [] };
    expect(runLabel(3, logOnly, trans)).toBe('Run 3 · In[6] · log() only');
  });
});

const thresholds = {
  explode_abs: null,
  explode_factor: 50,
  explode_warmup: 20,
  vanish_floor: 1e-7,
  vanish_ratio: 1e-6,
  vanish_steps: 50,
  amp_skips: 5,
  amp_min_scale: 1
};

function track(runId: number, step: number): IGradTrack {
  return gradTrack('opt', { step, sampled: step, run: runId });
}

function grads(tracks: IGradTrack[], alerts = 0): IGrads {
  return {
    method: 'grads',
    state: 'active',
    reason: null,
    mode: 'auto',
    stride: 1,
    budget: 0.01,
    thresholds,
    alerts,
    alerts_total: alerts,
    tracks
  };
}

function alert(id: string, runId: number, step: number): IAlert {
  return {
    method: 'alert',
    alerts: [
      {
        id,
        source: 'grads',
        kind: 'explosion',
        severity: 'warning',
        step,
        layer: 'fc',
        message: 'exploding',
        remedy: 'lower the learning rate',
        track: 'opt',
        value: 1e9,
        time: 1718000000 + 1000 * runId + step,
        run: runId
      }
    ]
  };
}

describe('runs: gradient tracks and alarms per run', () => {
  it("shows the current run's track and alarms only; earlier ones when picked", () => {
    const m = new TorchDbgModel({ capacity: 100 });
    deliver(m, runs(1, [1]));
    deliver(m, grads([track(1, 40)]));
    deliver(m, alert('a1', 1, 12));
    deliver(m, alert('a2', 1, 30));
    expect(m.grads.status!.tracks.map(t => [t.run, t.step])).toEqual([[1, 40]]);
    expect(m.grads.alerts.map(a => a.id)).toEqual(['a1', 'a2']);
    // run 2: the kernel lists run 2's track only; its track replaces run 1's
    deliver(m, runs(2, [1, 2]));
    deliver(m, grads([track(2, 3)]));
    deliver(m, alert('b1', 2, 2));
    expect(m.grads.status!.tracks.map(t => [t.run, t.step])).toEqual([[2, 3]]);
    expect(m.grads.alerts.map(a => a.id)).toEqual(['b1']);
    expect(m.grads.alertsOf(1).length).toBe(2);
    expect([...m.grads.counts()]).toEqual([
      [1, 2],
      [2, 1]
    ]);
    expect(m.grads.allAlerts.map(a => a.id)).toEqual(['a1', 'a2', 'b1']);
    // picking run 1 shows its kept track and alarms
    m.grads.focusStep = 2;
    m.runs.pick(1);
    expect(m.grads.shownRun).toBe(1);
    expect(m.grads.status!.tracks.map(t => [t.run, t.step])).toEqual([[1, 40]]);
    expect(m.grads.alerts.map(a => a.id)).toEqual(['a1', 'a2']);
    // a marked step belongs to a run: it is cleared when the run shown changes
    expect(m.grads.focusStep).toBeNull();
    // idle: the kernel lists no track; the last run's stays shown
    m.runs.pick(null);
    deliver(m, runs(null, [1, 2]));
    deliver(m, grads([]));
    expect(m.grads.status!.tracks.map(t => [t.run, t.step])).toEqual([[2, 3]]);
  });

  it('a kernel without runs keeps showing every track and alarm', () => {
    const m = new TorchDbgModel({ capacity: 100 });
    const t = track(1, 5);
    delete t.run;
    const msg = alert('x', 1, 3);
    delete msg.alerts[0].run;
    deliver(m, grads([t]));
    deliver(m, msg);
    expect(m.grads.status!.tracks.length).toBe(1);
    expect(m.grads.alerts.length).toBe(1);
  });
});
