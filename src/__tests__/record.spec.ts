/**
 * @jest-environment jsdom
 *
 * Issue #24 in the panel: the run store's record of the notebook's earlier
 * kernels (a banner for the one that died, its runs to reopen, charts, the
 * compare overlay, dismiss) and the memory panel's leak card, guard and
 * activations report. Fixtures are checked against the protocol schema.
 */
import { act, mountEach, React } from './dom';

import type { TorchDbgConnection } from '../connection/connection';
import { routeMessage } from '../connection/router';
import { TorchDbgModel } from '../model/model';
import { availability } from '../model/availability';
import type { MemoryPanel as MemoryPanelT } from '../panels/memory/body';
import type { RecordPanel as RecordPanelT } from '../panels/record/view';
import { chartSeries } from '../panels/record/charts';
import type {
  IActivations,
  IMemoryLeak,
  IRecord,
  IRecordKernel,
  IRecordRunData
} from '../protocol/generated';
import type { IAck, IMemory } from '../protocol/messages';
import { hello } from './fakeKernel';
import { schemaDef } from './schema';
import { trans, XSS } from './translate';

/* eslint-disable @typescript-eslint/no-require-imports */
const {
  MemoryPanel
}: { MemoryPanel: typeof MemoryPanelT } = require('../panels/memory/body');
const {
  RecordPanel
}: { RecordPanel: typeof RecordPanelT } = require('../panels/record/view');
/* eslint-enable @typescript-eslint/no-require-imports */

const MiB = 2 ** 20;
const GiB = 2 ** 30;
const KERNEL = '0123456789abcdef';
const OTHER = 'fedcba9876543210';

function kernel(over: Partial<IRecordKernel> = {}): IRecordKernel {
  return {
    id: KERNEL,
    started: 1718000000,
    last_write: 1718000500,
    end: { kind: 'signal', code: 9, oom_kills: 0, text: 'killed by signal 9' },
    run: 3,
    step: 4812,
    memory: {
      used: Math.round(23.6 * GiB),
      limit: 24 * GiB,
      per_step: Math.round(2.1 * MiB)
    },
    text:
      'The kernel died at step 4,812 of run 3 (killed by signal 9; memory was ' +
      'climbing 2.1 MiB/step, 23.6 of 24 GiB)',
    runs: [
      {
        id: 3,
        start: 1718000100,
        end: null,
        steps: 4812,
        alerts: 1,
        cell_id: 'c1',
        execution_count: 4,
        optimizers: ['opt']
      }
    ],
    exception: null,
    dismissed: false,
    ...over
  };
}

function record(kernels: IRecordKernel[]): IRecord {
  return {
    method: 'record',
    notebook: 'train.ipynb',
    store: 'on',
    kernels,
    note: null
  };
}

function runData(): IRecordRunData {
  return {
    method: 'record_run',
    kernel: KERNEL,
    run: 3,
    info: kernel().runs[0],
    series: [
      { name: 'loss', x: [1, 2, 3], y: [2.5, 1.5, 'NaN'] },
      { name: 'grad/model/total', x: [1, 2, 3], y: [1, 2, 3] },
      { name: 'mem/cpu/rss', x: [1718000101, 1718000102], y: [MiB, 2 * MiB] },
      { name: 'grad/model/fc1', x: [1, 2], y: [0.5, 0.6] }
    ],
    alerts: [
      {
        id: 'a1',
        source: 'memory',
        kind: 'memory_leak',
        severity: 'warning',
        step: 4000,
        layer: null,
        message: `RSS grows 2.1 MiB/step ${XSS}`,
        remedy: 'accumulate loss.item()',
        track: 'memory',
        value: null,
        time: 1718000400,
        run: 3
      }
    ]
  };
}

/** A connection whose actions answer with an ack and are recorded. */
function fakeConn(model: TorchDbgModel): {
  conn: TorchDbgConnection;
  sent: { action: string; args: any }[];
} {
  const sent: { action: string; args: any }[] = [];
  const conn = {
    model,
    sendAction: (action: string, args: unknown) => {
      sent.push({ action, args });
      return Promise.resolve({
        method: 'ack',
        request_id: 'r',
        action,
        result: { path: 'torchdbg-runs/train-run3' }
      } as IAck);
    }
  } as unknown as TorchDbgConnection;
  return { conn, sent };
}

const dom = mountEach();

/** Run `fn` in act, then let the render scheduled for the next frame happen. */
async function update(fn: () => void): Promise<void> {
  await act(async () => {
    fn();
    await new Promise(r => requestAnimationFrame(() => r(null)));
  });
}

describe('the record of earlier kernels', () => {
  it('uses fixtures the schema accepts', () => {
    const rec = schemaDef('Record');
    const ok = rec(record([kernel()]));
    expect(rec.errors ?? []).toEqual([]);
    expect(ok).toBe(true);
    expect(schemaDef('RecordRunData')(runData())).toBe(true);
  });

  it('is routed to the model and survives a reset (the kernel that died)', () => {
    const model = new TorchDbgModel();
    routeMessage(model, record([kernel()]), [], 's');
    routeMessage(model, runData(), [], 's');
    model.reset();
    expect(model.record.banners.map(k => k.id)).toEqual([KERNEL]);
    expect(
      model.record.opened.get(`${KERNEL}:3`)!.series.get('loss')!.y[2]
    ).toBeNaN();
  });

  it('shows a banner that says why and where it died, as text, until dismissed', async () => {
    const model = new TorchDbgModel();
    model.record.apply(
      record([
        kernel({
          exception: {
            ename: 'RuntimeError',
            evalue: `CUDA out of memory ${XSS}`,
            cell_id: 'c1',
            line: 7,
            time: 1718000499
          }
        }),
        kernel({
          id: OTHER,
          end: { kind: 'shutdown', code: 0, oom_kills: 0, text: 'shut down' },
          text: 'The kernel shut down after run 1.',
          runs: [{ ...kernel().runs[0], id: 1, steps: 20, alerts: 0 }]
        })
      ])
    );
    const { conn, sent } = fakeConn(model);
    dom.render(React.createElement(RecordPanel, { conn, trans }));
    const banner = dom.host.querySelector('.jp-TorchDbg-recordBanner')!;
    expect(banner.getAttribute('data-end')).toBe('signal');
    expect(banner.textContent).toContain(
      'The kernel died at step 4,812 of run 3 (killed by signal 9'
    );
    expect(banner.textContent).toContain('RuntimeError: CUDA out of memory');
    expect(dom.host.querySelector('img')).toBeNull();
    // the cleanly shut down kernel is not a banner, but its runs can be reopened
    expect(dom.host.querySelectorAll('.jp-TorchDbg-recordBanner')).toHaveLength(
      1
    );
    const earlier = dom.host.querySelector('.jp-TorchDbg-recordEarlier')!;
    expect(earlier.textContent).toContain('run 1 · 20 steps');
    const runButton = banner.querySelector<HTMLButtonElement>(
      '.jp-TorchDbg-recordRuns button'
    )!;
    expect(runButton.textContent).toBe('run 3 · 4812 steps · 1 alarm');
    await act(async () => runButton.click());
    expect(sent).toEqual([
      { action: 'open_record', args: { kernel: KERNEL, run: 3 } }
    ]);
    const dismiss = banner.querySelector<HTMLButtonElement>(
      '.jp-TorchDbg-recordDismiss'
    )!;
    await act(async () => dismiss.click());
    expect(sent[1]).toEqual({
      action: 'dismiss_record',
      args: { kernel: KERNEL }
    });
    // the kernel's answer: the record again, dismissed
    await update(() =>
      model.record.apply(record([kernel({ dismissed: true })]))
    );
    expect(dom.host.querySelector('.jp-TorchDbg-recordBanner')).toBeNull();
    // a dismissed kernel's runs are still there to reopen
    expect(dom.host.querySelector('.jp-TorchDbg-recordEarlier')).not.toBeNull();
  });

  it('draws a reopened run: loss, gradient total and memory charts, its alarms, compare and export', async () => {
    const model = new TorchDbgModel();
    model.hello = hello({
      capabilities: {
        ...hello().capabilities,
        tensorboard: { available: true, reason: null }
      }
    }) as any;
    model.record.apply(record([kernel()]));
    const { conn, sent } = fakeConn(model);
    dom.render(React.createElement(RecordPanel, { conn, trans }));
    await update(() => model.record.applyRun(runData()));
    const view = dom.host.querySelector('.jp-TorchDbg-recordRun')!;
    expect(
      Array.from(view.querySelectorAll('.jp-TorchDbg-recordChart')).map(c =>
        c.getAttribute('data-series')
      )
    ).toEqual(['loss', 'grad/model/total', 'mem/cpu/rss']);
    expect(
      view.querySelector('.jp-TorchDbg-recordAlerts')!.textContent
    ).toContain('step 4000');
    expect(view.querySelector('img')).toBeNull();
    // compare: the recorded loss is drawn behind the live loss chart
    expect(model.overlayData('loss')).toEqual([]);
    const compare = view.querySelector<HTMLButtonElement>(
      '.jp-TorchDbg-recordCompare'
    )!;
    await update(() => compare.click());
    const overlay = model.overlayData('loss');
    expect(overlay.map(o => o.label)).toEqual(['died kernel · run 3']);
    expect(Array.from(overlay[0].x)).toEqual([1, 2, 3]);
    // a clock-time memory series is never overlaid on another kernel's clock
    expect(model.overlayData('mem/cpu/rss')).toEqual([]);
    await update(() => compare.click());
    expect(model.overlayData('loss')).toEqual([]);
    const tb = view.querySelector<HTMLButtonElement>(
      '.jp-TorchDbg-recordTensorboard'
    )!;
    expect(tb.disabled).toBe(false);
    await act(async () => tb.click());
    expect(sent).toEqual([
      { action: 'export_tensorboard', args: { run: 3, kernel: KERNEL } }
    ]);
    expect(dom.host.textContent).toContain(
      'TensorBoard files written to torchdbg-runs/train-run3'
    );
  });

  it('picks the charts in order and leaves out per-layer series', () => {
    const model = new TorchDbgModel();
    model.record.applyRun(runData());
    const opened = model.record.opened.get(`${KERNEL}:3`)!;
    expect(chartSeries(opened).map(s => s.name)).toEqual([
      'loss',
      'grad/model/total',
      'mem/cpu/rss'
    ]);
  });

  it('forgets opened runs of kernels the record no longer lists', () => {
    const model = new TorchDbgModel();
    model.record.apply(record([kernel()]));
    model.record.applyRun(runData());
    model.record.compare = `${KERNEL}:3`;
    model.record.apply(record([]));
    expect(model.record.opened.size).toBe(0);
    expect(model.record.compare).toBeNull();
    expect(model.overlayData('loss')).toEqual([]);
  });
});

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
    nvml: { available: false, reason: 'NVML library not found' },
    guard: {
      pause_at: null,
      limit: 24 * GiB,
      limit_source: 'cgroup',
      tripped: null
    },
    leak: null,
    activations: null,
    ...over
  };
}

const leak: IMemoryLeak = {
  series: 'mem/cpu/rss',
  counter: 'rss',
  device: null,
  per_step: Math.round(2.1 * MiB),
  per_step_err: Math.round(0.05 * MiB),
  steps: 200,
  run: 1,
  step: 250,
  used: Math.round(1.45 * GiB),
  limit: 24 * GiB,
  limit_source: 'cgroup',
  steps_left: 11000,
  holders: [
    {
      name: 'total_loss',
      kind: 'graph',
      bytes: null,
      count: 250,
      text: 'holds the autograd graph of about 250 steps',
      fix: 'accumulate `loss.item()` or `loss.detach()`'
    },
    {
      name: `kept${XSS}`,
      kind: 'container',
      bytes: 800 * MiB,
      count: 250,
      text: '250 tensors, 800 MiB (grows by 1 per step)',
      fix: null
    }
  ],
  search: 'done',
  search_note: null,
  text: 'RSS grows 2.1 MiB/step over the last 200 steps; at this rate the kernel runs out in about 11,000 steps'
};

const activations: IActivations = {
  state: 'done',
  time: 1718000002,
  device: 'cpu',
  run: 1,
  step: 12,
  batch: 64,
  total: 640 * MiB,
  per_sample: 10 * MiB,
  modules: [
    { name: 'encoder.layer.0', bytes: 400 * MiB, tensors: 12 },
    { name: 'head', bytes: 40 * MiB, tensors: 2 }
  ],
  free: 4 * GiB,
  limit_source: 'cgroup',
  fits: 409,
  text: 'batch 64 saves 640 MiB for backward (10 MiB per sample); about 409 fits'
};

describe('memory: leaks, the guard, activations', () => {
  it('uses fixtures the schema accepts', () => {
    const v = schemaDef('Memory');
    v(memory({ leak, activations }));
    expect(v.errors ?? []).toEqual([]);
  });

  it('names the holders, with their fixes, as text', () => {
    const model = new TorchDbgModel();
    model.state = { kind: 'connected' };
    model.memory.apply(memory({ leak }));
    const { conn } = fakeConn(model);
    dom.render(React.createElement(MemoryPanel, { model, conn, trans }));
    const card = dom.host.querySelector('.jp-TorchDbg-leak')!;
    expect(card.textContent).toContain('runs out in about 11,000 steps');
    const items = Array.from(
      card.querySelectorAll('.jp-TorchDbg-leakHolders li')
    );
    expect(items.map(li => li.getAttribute('data-kind'))).toEqual([
      'graph',
      'container'
    ]);
    expect(items[0].textContent).toContain('total_loss');
    expect(items[0].textContent).toContain('loss.item()');
    expect(card.querySelector('img')).toBeNull();
  });

  it('says it is still looking while the search is pending', () => {
    const model = new TorchDbgModel();
    model.state = { kind: 'connected' };
    model.memory.apply(
      memory({ leak: { ...leak, holders: [], search: 'pending' } })
    );
    dom.render(
      React.createElement(MemoryPanel, {
        model,
        conn: fakeConn(model).conn,
        trans
      })
    );
    expect(dom.host.querySelector('.jp-TorchDbg-leak')!.textContent).toContain(
      'Looking for what holds it'
    );
  });

  it('the guard checkbox sends set_memory_guard on and off', async () => {
    const model = new TorchDbgModel();
    model.state = { kind: 'connected' };
    model.memory.apply(memory());
    const { conn, sent } = fakeConn(model);
    dom.render(React.createElement(MemoryPanel, { model, conn, trans }));
    const guard = dom.host.querySelector('.jp-TorchDbg-guard')!;
    expect(guard.textContent).toContain(
      "Pause training at 90% of 24.0 GiB (the kernel's cgroup limit)"
    );
    const box = guard.querySelector<HTMLInputElement>('input')!;
    expect(box.checked).toBe(false);
    await act(async () => box.click());
    expect(sent).toEqual([
      { action: 'set_memory_guard', args: { pause_at: 0.9 } }
    ]);
    await update(() =>
      model.memory.apply(
        memory({
          guard: {
            pause_at: 0.9,
            limit: 24 * GiB,
            limit_source: 'cgroup',
            tripped:
              'Paused at step 812: 21.7 GiB is 90% of the limit. Resume continues.'
          }
        })
      )
    );
    expect(box.checked).toBe(true);
    expect(
      dom.host.querySelector('.jp-TorchDbg-guardTripped')!.textContent
    ).toContain('Resume continues');
    await act(async () => box.click());
    expect(sent[1]).toEqual({
      action: 'set_memory_guard',
      args: { pause_at: null }
    });
  });

  it('measures activations on a click and shows the modules with their share', async () => {
    const model = new TorchDbgModel();
    model.state = { kind: 'connected' };
    model.memory.apply(memory());
    const { conn, sent } = fakeConn(model);
    dom.render(React.createElement(MemoryPanel, { model, conn, trans }));
    const button = dom.host.querySelector<HTMLButtonElement>(
      '.jp-TorchDbg-measureAct'
    )!;
    expect(button.disabled).toBe(false);
    await act(async () => button.click());
    expect(sent).toEqual([{ action: 'measure_activations', args: {} }]);
    await update(() =>
      model.memory.apply(
        memory({ activations: { ...activations, state: 'armed' } })
      )
    );
    // armed: the button says why it is off, and the palette agrees
    expect(button.disabled).toBe(true);
    expect(availability(model, trans).measureActivations.why).toContain(
      'Already armed'
    );
    await update(() => model.memory.apply(memory({ activations })));
    const view = dom.host.querySelector('.jp-TorchDbg-activations')!;
    expect(view.textContent).toContain('about 409 fits');
    const rows = Array.from(view.querySelectorAll('tbody tr')).map(tr =>
      Array.from(tr.querySelectorAll('td')).map(td => td.textContent)
    );
    expect(rows).toEqual([
      ['encoder.layer.0', '400 MiB', ''],
      ['head', '40.0 MiB', '']
    ]);
    const bars = Array.from(
      view.querySelectorAll<HTMLElement>('.jp-TorchDbg-actBar')
    ).map(b => b.style.width);
    expect(bars).toEqual(['100%', '10%']);
  });
});
