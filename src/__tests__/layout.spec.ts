/**
 * The layout's logic without a DOM: the Now strip's figures, the compact number
 * format of narrow columns, the tidy CSV export, the alarm list's order, the
 * series filter and pins.
 */
import { TorchDbgModel } from '../model/model';
import { CSV_HEADER, gradsCsv } from '../panels/grads/export';
import {
  SHOWN_ALARMS,
  trainingOrder,
  visibleAlarms
} from '../panels/grads/alertList';
import { orderSeries, seriesFilter } from '../panels/series/body';
import {
  IAlertItem,
  IControl,
  IGrads,
  IGradTrack,
  IMemory
} from '../protocol/messages';
import { nowFigures, pickLossSeries } from '../sidebar/nowStrip';
import { formatCompact } from '../ui/formatCompact';
import { encodeBlock } from './fakeKernel';
import { gradTrack } from './fixtures';
import { schemaDef } from './schema';

const kernelMessage = schemaDef('KernelMessage');
const MiB = 2 ** 20;

function track(name: string, over: Partial<IGradTrack> = {}): IGradTrack {
  return gradTrack(name, {
    layers: [
      {
        name: 'model.fc',
        series: `grad/${name}/model.fc`,
        param_series: `param/${name}/model.fc`,
        numel: 10,
        params: [{ name: 'weight', shape: [2, 5], dtype: 'float32' }]
      }
    ],
    ...over
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
    ...over
  };
}

function memory(over: Partial<IMemory> = {}): IMemory {
  return {
    method: 'memory',
    time: 1718000001,
    state: 'no_cuda',
    reason: null,
    devices: [],
    host: { rss: 512 * MiB, reason: null, series: 'mem/cpu/rss' },
    breakdown: null,
    recording: { state: 'off', max_entries: null, since: null, last: null },
    last_oom: null,
    nvml: { available: false, reason: 'no NVML' },
    ...over
  };
}

function alarm(id: string, step: number, time: number): IAlertItem {
  return {
    id,
    source: 'grads',
    kind: 'explosion',
    severity: 'warning',
    step,
    layer: 'model.fc',
    message: `norm exploded at step ${step} in \`model.fc\``,
    remedy: 'lower the learning rate',
    track: 'opt',
    value: 1e9,
    time
  };
}

/** A model with `names` logged over steps 1..3 (values `base + step`). */
function withSeries(names: string[], base = 0): TorchDbgModel {
  const m = new TorchDbgModel();
  const block = encodeBlock(
    [1, 2, 3],
    names.map((_, j) => [1, 2, 3].map(s => base + 10 * j + s))
  );
  m.applySeries(
    { method: 'series', seq: 0, blocks: [{ id: 1, names, count: 3 }] },
    [block.x, block.y]
  );
  return m;
}

describe('formatCompact: numbers that never wrap in a narrow column', () => {
  it('keeps 3 significant digits and at most 9 characters', () => {
    const cases: [number, string][] = [
      [9.461e-5, '9.46e-5'],
      [0.45213, '0.452'],
      [0.5, '0.5'],
      [123.45, '123'],
      [1234.5, '1235'],
      [123456, '1.23e5'],
      [1.5e12, '1.50e12'],
      [0, '0'],
      [NaN, 'NaN'],
      [Infinity, '+Inf'],
      [-Infinity, '-Inf']
    ];
    for (const [v, text] of cases) {
      expect(formatCompact(v)).toBe(text);
    }
    // the Now strip: 2 digits in exponent form, 3 otherwise
    expect(formatCompact(1.691e25, 2)).toBe('1.7e25');
    expect(formatCompact(0.45213, 2)).toBe('0.452');
    for (const v of [1e-300, -3.3e-7, 99999.9, 7.77e77, -0.000999]) {
      expect(formatCompact(v).length).toBeLessThanOrEqual(9);
      expect(formatCompact(v)).not.toMatch(/\s|\//);
    }
  });
});

describe('the Now strip', () => {
  it('picks the logged loss: `loss`, else a name containing it, else the first', () => {
    expect(pickLossSeries(['acc', 'loss', 'val_loss'])).toBe('loss');
    expect(pickLossSeries(['grad/opt/total', 'acc', 'Train_Loss'])).toBe(
      'Train_Loss'
    );
    expect(pickLossSeries(['mem/cpu/rss', 'acc', 'lr'])).toBe('acc');
    expect(pickLossSeries(['grad/opt/total'])).toBeNull();
  });

  it('shows the step, loss, latest total norm, RSS and the alarm count', () => {
    const m = withSeries(['acc', 'val_loss', 'grad/opt/total']);
    const status = grads([track('opt')]);
    expect(kernelMessage(status)).toBe(true);
    m.grads.apply(status);
    const c = control({ step: 120, idle: false, run: 2 });
    expect(kernelMessage(c)).toBe(true);
    m.control.apply(c);
    m.memory.apply(memory());
    m.grads.applyAlert({
      method: 'alert',
      alerts: [alarm('a1', 4, 1), alarm('a2', 9, 2)]
    });
    const f = nowFigures(m);
    expect(f.idle).toBe(false);
    expect(f.step).toBe(120);
    expect(f.run).toBe(2);
    expect(f.loss).toEqual({ name: 'val_loss', value: 13 });
    // grad/opt/total is the third logged name: 20 + step 3
    expect(f.grad).toEqual({ track: 'opt', value: 23 });
    expect(f.memory).toEqual({ kind: 'rss', bytes: 512 * MiB, where: 'cpu' });
    expect(f.alarms).toBe(2);
  });

  it('says idle, shows CUDA allocated when CUDA is active, and nothing it lacks', () => {
    const m = new TorchDbgModel();
    expect(nowFigures(m)).toEqual({
      idle: false,
      run: null,
      step: null,
      loss: null,
      grad: null,
      memory: null,
      alarms: 0,
      ranks: null
    });
    m.control.apply(control({ step: 40, idle: true }));
    const device = {
      device: 'cuda:0',
      index: 0,
      name: 'GPU',
      uuid: null,
      nvml_index: null,
      matched_by: null,
      mig: null,
      series: {},
      allocator: {
        allocated: 3 * MiB,
        reserved: 8 * MiB,
        peak: 4 * MiB
      },
      allocator_reason: null,
      nvml: null,
      nvml_reason: null
    } as unknown as IMemory['devices'][number];
    m.memory.apply(memory({ state: 'active', devices: [device] }));
    const f = nowFigures(m);
    expect(f.idle).toBe(true);
    expect(f.step).toBe(40);
    expect(f.memory).toEqual({ kind: 'cuda', bytes: 3 * MiB, where: 'cuda:0' });
  });

  it('is not idle while a run is current, even with no optimizer step (only log())', () => {
    const m = withSeries(['loss']);
    m.control.apply(control({ step: 0, idle: true, run: null }));
    expect(nowFigures(m).idle).toBe(true);
    // the kernel says run 4 is current: the loop only calls log()
    m.applyRuns({ method: 'runs', current: 4, runs: [] });
    const f = nowFigures(m);
    expect(f.idle).toBe(false);
    expect(f.run).toBe(4);
    // the newest x of the loss series shown (steps 1..3)
    expect(f.step).toBe(3);
  });
});

describe('CSV export: one tidy table', () => {
  const parse = (csv: string) =>
    csv
      .trim()
      .split('\n')
      .map(line => line.split(',').map(cell => cell.replace(/^"|"$/g, '')));

  it('has one header row run,step,layer,norm and the total as layer `total`', () => {
    const m = withSeries(['grad/opt/total', 'grad/opt/model.fc'], 0.5);
    m.grads.apply(grads([track('opt', { run: 3 })]));
    const rows = parse(gradsCsv(m));
    expect(rows[0].join(',')).toBe(CSV_HEADER);
    expect(CSV_HEADER).toBe('run,step,layer,norm');
    expect(rows.filter(r => r.join(',') === CSV_HEADER)).toHaveLength(1);
    expect(rows.slice(1)).toEqual([
      ['3', '1', 'total', '1.5'],
      ['3', '2', 'total', '2.5'],
      ['3', '3', 'total', '3.5'],
      ['3', '1', 'model.fc', '11.5'],
      ['3', '2', 'model.fc', '12.5'],
      ['3', '3', 'model.fc', '13.5']
    ]);
    // every row has the header's four columns
    expect(rows.every(r => r.length === 4)).toBe(true);
  });

  it('leaves run blank when the kernel gives none, names optimizers when several', () => {
    const m = withSeries([
      'grad/g/total',
      'grad/g/model.fc',
      'grad/d/total',
      'grad/d/model.fc'
    ]);
    m.grads.apply(grads([track('g'), track('d')]));
    const rows = parse(gradsCsv(m));
    expect(rows[0].join(',')).toBe(CSV_HEADER);
    expect(rows[1]).toEqual(['', '1', 'g/total', '1']);
    expect(new Set(rows.slice(1).map(r => r[2]))).toEqual(
      new Set(['g/total', 'g/model.fc', 'd/total', 'd/model.fc'])
    );
    expect(rows).toHaveLength(1 + 4 * 3);
  });

  it('writes NaN and Inf as pandas reads them', () => {
    const m = new TorchDbgModel();
    const b = encodeBlock([1, 2], [[NaN, Infinity]]);
    m.applySeries(
      {
        method: 'series',
        seq: 0,
        blocks: [{ id: 1, names: ['grad/opt/total'], count: 2 }]
      },
      [b.x, b.y]
    );
    m.grads.apply(grads([track('opt', { layers: [] })]));
    expect(gradsCsv(m)).toBe(`${CSV_HEADER}\n,1,"total",nan\n,2,"total",inf\n`);
  });
});

describe('alarm list order', () => {
  it('orders by step, not by the time raised (the root cause first)', () => {
    // the explosion of step 5 is raised after the overflow of step 17 it caused
    const late = alarm('explosion', 5, 20);
    const early = alarm('overflow', 17, 10);
    expect(trainingOrder([early, late]).map(a => a.id)).toEqual([
      'explosion',
      'overflow'
    ]);
    expect(
      trainingOrder([
        { ...alarm('r2', 1, 30), run: 2 },
        { ...alarm('r1', 9, 1), run: 1 }
      ]).map(a => a.id)
    ).toEqual(['r1', 'r2']);
  });

  it('keeps the first alarm and the latest ones, oldest first', () => {
    const many = Array.from({ length: 20 }, (_, i) => alarm(`a${i}`, i + 1, i));
    const { shown, hidden } = visibleAlarms(many, false);
    expect(shown[0].id).toBe('a0');
    expect(shown[shown.length - 1].id).toBe('a19');
    expect(shown).toHaveLength(SHOWN_ALARMS);
    expect(hidden).toBe(20 - SHOWN_ALARMS);
    expect(visibleAlarms(many, true).shown.map(a => a.id)).toEqual(
      many.map(a => a.id)
    );
    expect(visibleAlarms(many.slice(0, 3), false).hidden).toBe(0);
  });
});

describe('series filter and pins', () => {
  const names = ['loss', 'val/loss', 'val/acc', 'lr', 'loss(train)'];
  it('matches substrings and regular expressions, case-insensitive', () => {
    expect(names.filter(seriesFilter('LOSS').test)).toEqual([
      'loss',
      'val/loss',
      'loss(train)'
    ]);
    expect(names.filter(seriesFilter('^val/').test)).toEqual([
      'val/loss',
      'val/acc'
    ]);
    expect(names.filter(seriesFilter('acc|^lr$').test)).toEqual([
      'val/acc',
      'lr'
    ]);
    // not a valid expression: a substring
    expect(names.filter(seriesFilter('loss(').test)).toEqual(['loss(train)']);
    expect(names.filter(seriesFilter('  ').test)).toEqual(names);
  });

  it('puts pinned series first, in pin order, ignoring unknown pins', () => {
    expect(orderSeries(names, ['lr', 'gone', 'val/acc'])).toEqual([
      'lr',
      'val/acc',
      'loss',
      'val/loss',
      'loss(train)'
    ]);
  });
});
