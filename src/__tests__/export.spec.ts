/**
 * Export of every run and every series as one tidy table (issue #22): the
 * logged series, the gradient monitor's and the memory timelines of every run
 * the browser holds, the alarms, and the reopened runs of an earlier kernel
 * (issue #24), in the long format `kernel,run,series,step,time,value,text`,
 * readable by one `pandas.read_csv`.
 * The gradient CSV (`run,step,layer,norm`) holds every run too, not only the
 * shown one.
 */
import { TorchDbgModel } from '../model/model';
import { CSV_HEADER, gradsCsv, gradsJson } from '../panels/grads/export';
import { hasTidyRows, TIDY_HEADER, tidyCsv } from '../panels/series/export';
import type { IGradTrack, IGrads, ISeries } from '../protocol/messages';
import { encodeBlock } from './fakeKernel';
import { gradTrack } from './fixtures';
import { schemaDef } from './schema';

const seriesMessage = schemaDef('Series');

/** Push one block of points (x, one y list per name) for `run` (absent: none). */
function push(
  m: TorchDbgModel,
  seq: number,
  id: number,
  names: string[],
  xs: number[],
  ys: number[][],
  run?: number
): void {
  const b = encodeBlock(xs, ys);
  const msg: ISeries = {
    method: 'series',
    seq: seq + 1,
    blocks: [
      { id, names, count: xs.length, ...(run !== undefined ? { run } : {}) }
    ]
  };
  if (!seriesMessage(msg)) {
    throw new Error(JSON.stringify(seriesMessage.errors));
  }
  m.applySeries(msg, [b.x, b.y]);
}

function track(name: string, run: number): IGradTrack {
  return gradTrack(name, {
    run,
    layers: [
      {
        name: 'model.fc',
        series: `grad/${name}/model.fc`,
        param_series: `param/${name}/model.fc`,
        numel: 10,
        params: [{ name: 'weight', shape: [2, 5], dtype: 'float32' }]
      }
    ]
  });
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
      explode_factor: 50,
      explode_warmup: 20,
      vanish_floor: 1e-7,
      vanish_ratio: 1e-6,
      vanish_steps: 50,
      amp_skips: 5,
      amp_min_scale: 1
    },
    alerts: 0,
    tracks
  };
}

/** Two runs: each logs `loss` and has a gradient track; memory outside runs. */
function twoRuns(): TorchDbgModel {
  const m = new TorchDbgModel();
  push(
    m,
    0,
    1,
    ['loss', 'grad/opt/total', 'grad/opt/model.fc'],
    [1, 2],
    [
      [2.5, 1.25],
      [10, 8],
      [3, 2]
    ],
    1
  );
  m.grads.apply(grads([track('opt', 1)]));
  push(m, 1, 2, ['mem/cpu/rss'], [1_700_000_000], [[1024]]);
  push(
    m,
    2,
    3,
    ['loss', 'grad/opt/total', 'grad/opt/model.fc'],
    [1, 2, 3],
    [
      [3, NaN, Infinity],
      [12, 11, 0.1],
      [4, 5, 6]
    ],
    2
  );
  m.grads.apply(grads([track('opt', 2)]));
  m.applyRuns({ method: 'runs', current: 2, runs: [] });
  return m;
}

const rows = (csv: string) =>
  csv
    .trim()
    .split('\n')
    .map(line => line.split(','));

describe('tidyCsv: every run and every series as one long table', () => {
  it('has one row per point of every run: steps for series, time for memory', () => {
    const m = twoRuns();
    expect(m.runs.shown).toBe(2); // the panel shows run 2 only ...
    const csv = tidyCsv(m);
    expect(TIDY_HEADER).toBe('kernel,run,series,step,time,value,text');
    // ... the table holds both runs, oldest first, each run's series in order;
    // the memory timeline (recorded outside any run) has its Unix time
    expect(csv).toBe(
      [
        TIDY_HEADER,
        ',,"mem/cpu/rss",,1700000000,1024,',
        ',1,"loss",1,,2.5,',
        ',1,"loss",2,,1.25,',
        ',1,"grad/opt/total",1,,10,',
        ',1,"grad/opt/total",2,,8,',
        ',1,"grad/opt/model.fc",1,,3,',
        ',1,"grad/opt/model.fc",2,,2,',
        ',2,"loss",1,,3,',
        ',2,"loss",2,,nan,',
        ',2,"loss",3,,inf,',
        ',2,"grad/opt/total",1,,12,',
        ',2,"grad/opt/total",2,,11,',
        ',2,"grad/opt/total",3,,0.1,',
        ',2,"grad/opt/model.fc",1,,4,',
        ',2,"grad/opt/model.fc",2,,5,',
        ',2,"grad/opt/model.fc",3,,6,'
      ].join('\n') + '\n'
    );
    // seven columns on every row
    expect(rows(csv).every(r => r.length === 7)).toBe(true);
    expect(hasTidyRows(m)).toBe(true);
  });

  it('adds the alarms and a reopened run of an earlier kernel', () => {
    const m = twoRuns();
    m.grads.applyAlert({
      method: 'alert',
      alerts: [
        {
          id: 'a1',
          source: 'grads',
          kind: 'explosion',
          severity: 'warning',
          step: 2,
          layer: 'model.fc',
          message: 'norm 1e4, "x100" its level',
          remedy: 'clip',
          track: 'opt',
          value: 10000,
          time: 1700000001,
          run: 2
        }
      ]
    });
    m.record.applyRun({
      method: 'record_run',
      kernel: '0123456789abcdef',
      run: 3,
      info: {
        id: 3,
        start: 1,
        end: 2,
        steps: 2,
        alerts: 0,
        cell_id: null,
        execution_count: null,
        optimizers: []
      },
      series: [{ name: 'loss', x: [1, 2], y: [0.5, 'NaN'] }],
      alerts: []
    });
    const tail = tidyCsv(m).trim().split('\n').slice(-3);
    expect(tail).toEqual([
      ',2,"alarm/explosion",2,1700000001,10000,"norm 1e4, ""x100"" its level"',
      '0123456789abcdef,3,"loss",1,,0.5,',
      '0123456789abcdef,3,"loss",2,,nan,'
    ]);
  });

  it('quotes every name (commas, quotes) and neutralises formulas', () => {
    const m = new TorchDbgModel();
    push(m, 0, 1, ['val, "top-1"', '=cmd()'], [5], [[0.5], [1]]);
    expect(tidyCsv(m)).toBe(
      `${TIDY_HEADER}\n,,"val, ""top-1""",5,,0.5,\n,,"'=cmd()",5,,1,\n`
    );
  });

  it('has nothing to export before any point (the command is off)', () => {
    const m = new TorchDbgModel();
    expect(hasTidyRows(m)).toBe(false);
    expect(tidyCsv(m)).toBe(`${TIDY_HEADER}\n`);
    push(m, 0, 1, ['mem/cpu/rss'], [1_700_000_000], [[1024]]);
    expect(hasTidyRows(m)).toBe(true);
  });
});

describe('gradsCsv: every run, not only the shown one', () => {
  it('holds the norms of run 1 and run 2', () => {
    const m = twoRuns();
    const r = rows(gradsCsv(m));
    expect(r[0].join(',')).toBe(CSV_HEADER);
    expect(new Set(r.slice(1).map(x => x[0]))).toEqual(new Set(['1', '2']));
    expect(r.slice(1)).toEqual([
      ['1', '1', '"total"', '10'],
      ['1', '2', '"total"', '8'],
      ['1', '1', '"model.fc"', '3'],
      ['1', '2', '"model.fc"', '2'],
      ['2', '1', '"total"', '12'],
      ['2', '2', '"total"', '11'],
      ['2', '3', '"total"', '0.1'],
      ['2', '1', '"model.fc"', '4'],
      ['2', '2', '"model.fc"', '5'],
      ['2', '3', '"model.fc"', '6']
    ]);
    const json = JSON.parse(gradsJson(m));
    expect(json.tracks.map((t: { run: number }) => t.run)).toEqual([1, 2]);
  });
});
