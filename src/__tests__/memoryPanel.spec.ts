/**
 * @jest-environment jsdom
 *
 * The memory panel rendered with React in jsdom, fed a fake `memory` state and a
 * fake connection (ack): the last recording's snapshot file, how to open it and
 * its top allocation sites as text; the process RSS timeline in the CPU-only
 * state; charts mounted and disposed by the shared `useMounted` hook.
 */
import { act, mountEach, React } from './dom';
import type * as ReactT from 'react';

import type { TorchDbgConnection } from '../connection/connection';
import type { LineChart as LineChartT } from '../charts/lineChart';
import type { useMounted as useMountedT } from '../ui/useMounted';
import { TorchDbgModel } from '../model/model';
import { SeriesRing } from '../model/ringbuffer';
import type { MemoryPanel as MemoryPanelT } from '../panels/memory/body';
import type {
  IAck,
  IMemory,
  IMemoryDevice,
  IMemorySnapshotSummary
} from '../protocol/messages';
import { schemaDef } from './schema';
import { trans, XSS } from './translate';

/* eslint-disable @typescript-eslint/no-require-imports */
const {
  MemoryPanel
}: { MemoryPanel: typeof MemoryPanelT } = require('../panels/memory/body');
const {
  LineChart
}: { LineChart: typeof LineChartT } = require('../charts/lineChart');
const {
  useMounted
}: { useMounted: typeof useMountedT } = require('../ui/useMounted');
/* eslint-enable @typescript-eslint/no-require-imports */

const memoryMessage = schemaDef('Memory');
const snapshotSummary = schemaDef('MemorySnapshotSummary');

const MiB = 2 ** 20;

const summary: IMemorySnapshotSummary = {
  time: 1718000000.5,
  file: 'torchdbg_memory_20260603-101500.pickle',
  bytes: 345678,
  entries: 1234,
  oom_events: 1,
  top_sites: [
    {
      file: 'project/model.py',
      line: 42,
      function: 'forward',
      bytes: 48 * MiB,
      count: 2
    },
    {
      file: 'project/data.py',
      line: 7,
      function: XSS,
      bytes: 8 * MiB,
      count: 3
    }
  ],
  live_sites: [
    {
      file: 'project/model.py',
      line: 42,
      function: 'forward',
      bytes: 32 * MiB,
      count: 1
    }
  ]
};

function memory(over: Partial<IMemory> = {}): IMemory {
  return {
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
}

/** A CUDA device card's state before the first allocator sample. */
function cudaDevice(over: Partial<IMemoryDevice> = {}): IMemoryDevice {
  return {
    device: 'cuda:0',
    index: 0,
    name: 'GPU',
    uuid: null,
    nvml_index: null,
    matched_by: null,
    mig: null,
    series: {
      allocated: 'mem/cuda:0/allocated',
      reserved: 'mem/cuda:0/reserved',
      nvml_used: 'mem/cuda:0/nvml_used'
    } as IMemoryDevice['series'],
    allocator: null,
    allocator_reason: 'not sampled yet',
    nvml: null,
    nvml_reason: 'NVML unavailable',
    unavailable: {},
    ...over
  };
}

/** A connection whose actions answer with `reply` (what the kernel would ack). */
function fakeConn(reply: (action: string) => IAck): {
  conn: TorchDbgConnection;
  sent: { action: string; args: unknown }[];
} {
  const sent: { action: string; args: unknown }[] = [];
  const conn = {
    sendAction: (action: string, args: unknown) => {
      sent.push({ action, args });
      return Promise.resolve(reply(action));
    }
  } as unknown as TorchDbgConnection;
  return { conn, sent };
}

const dom = mountEach();

afterEach(() => {
  jest.restoreAllMocks();
});

function render(model: TorchDbgModel, conn: TorchDbgConnection): void {
  // the sidebar shows the panel only once the kernel side is connected
  model.state = { kind: 'connected' };
  dom.render(React.createElement(MemoryPanel, { model, conn, trans }));
}

describe('memory panel: the last recording', () => {
  it('uses fixtures the schema accepts', () => {
    expect(snapshotSummary(summary)).toBe(true);
    expect(
      memoryMessage(
        memory({ recording: { ...memory().recording, last: summary } })
      )
    ).toBe(true);
    expect(memoryMessage(memory())).toBe(true);
  });

  it('lists the top allocation sites with the file and how to open it, as text', () => {
    const model = new TorchDbgModel();
    model.memory.apply(
      memory({ recording: { ...memory().recording, last: summary } })
    );
    render(model, fakeConn(() => ({}) as IAck).conn);
    const snap = dom.host.querySelector('.jp-TorchDbg-snapshot')!;
    expect(snap.getAttribute('data-file')).toBe(summary.file);
    expect(
      snap.querySelector('.jp-TorchDbg-snapshotFile code')!.textContent
    ).toBe(summary.file);
    expect(snap.textContent).toContain('1234 events');
    expect(
      snap.querySelector('.jp-TorchDbg-snapshotHowto')!.textContent
    ).toContain("PyTorch's memory viewer");
    expect(
      snap.querySelector('pre.jp-TorchDbg-snapshotCommand')!.textContent
    ).toBe(
      'python -m torch.cuda._memory_viz trace_plot ' +
        'torchdbg_memory_20260603-101500.pickle -o torchdbg_memory_20260603-101500.html'
    );
    const rows = () =>
      Array.from(snap.querySelectorAll('.jp-TorchDbg-sites tbody tr')).map(tr =>
        Array.from(tr.querySelectorAll('td')).map(td => td.textContent)
      );
    // all allocations while recording, largest first: site (file:line function), bytes, count
    expect(rows()).toEqual([
      ['project/model.py:42 forward', '48.0 MiB', '2'],
      [`project/data.py:7 ${XSS}`, '8.0 MiB', '3']
    ]);
    // a kernel string is a text node, never markup (S1)
    expect(snap.querySelector('img')).toBeNull();
    // the other list: still allocated at the stop
    const live = Array.from(
      snap.querySelectorAll<HTMLButtonElement>('.jp-TorchDbg-siteTab')
    );
    expect(live.map(b => b.textContent)).toEqual([
      'allocated while recording (2)',
      'still live at stop (1)'
    ]);
    act(() => live[1].click());
    expect(live[1].getAttribute('aria-pressed')).toBe('true');
    expect(rows()).toEqual([['project/model.py:42 forward', '32.0 MiB', '1']]);
  });

  it('says so when a list is empty', () => {
    const model = new TorchDbgModel();
    model.memory.apply(
      memory({
        recording: {
          ...memory().recording,
          last: { ...summary, top_sites: [], live_sites: [] }
        }
      })
    );
    render(model, fakeConn(() => ({}) as IAck).conn);
    expect(dom.host.querySelector('.jp-TorchDbg-sites')).toBeNull();
    expect(
      dom.host.querySelector('.jp-TorchDbg-snapshot')!.textContent
    ).toContain('No allocation with a Python stack');
  });

  it('stop sends the action, notes the file, then shows the sites the status carries', async () => {
    const model = new TorchDbgModel();
    model.memory.apply(
      memory({
        state: 'active',
        recording: { state: 'on', max_entries: 100000, since: 1, last: null }
      })
    );
    const { conn, sent } = fakeConn(action => ({
      method: 'ack',
      request_id: 'r1',
      action,
      result: { state: 'off', max_entries: null, since: null, ...summary }
    }));
    render(model, conn);
    expect(dom.host.querySelector('.jp-TorchDbg-snapshot')).toBeNull();
    const stop = Array.from(dom.host.querySelectorAll('button')).find(
      b => b.textContent === 'Stop recording'
    )!;
    await act(async () => stop.click());
    expect(sent).toEqual([{ action: 'record_memory', args: { op: 'stop' } }]);
    expect(dom.host.querySelector('.jp-TorchDbg-note')!.textContent).toBe(
      'Memory snapshot saved: its top allocation sites are below.'
    );
    // the kernel broadcasts the status with the summary right after the ack
    act(() =>
      model.memory.apply(
        memory({
          state: 'active',
          recording: { ...memory().recording, last: summary }
        })
      )
    );
    await act(async () => {
      await new Promise(r => requestAnimationFrame(() => r(null)));
    });
    expect(
      dom.host.querySelectorAll('.jp-TorchDbg-sites tbody tr')
    ).toHaveLength(2);
  });
});

describe('memory panel: CPU-only state', () => {
  it('draws the process RSS timeline from host.series with the line chart', () => {
    const model = new TorchDbgModel();
    const ring = new SeriesRing(64);
    ring.push([100, 101, 102], [400 * MiB, 450 * MiB, 512 * MiB]);
    (model.series as Map<string, SeriesRing>).set('mem/cpu/rss', ring);
    const setData = jest.spyOn(LineChart.prototype, 'setData');
    model.memory.apply(memory());
    render(model, fakeConn(() => ({}) as IAck).conn);
    const card = dom.host.querySelector('.jp-TorchDbg-rssCard')!;
    expect(card.getAttribute('data-series')).toBe('mem/cpu/rss');
    expect(card.textContent).toContain('512 MiB');
    expect(
      card.querySelector('.jp-TorchDbg-chartHost .jp-TorchDbg-chart')
    ).not.toBeNull();
    expect(setData).toHaveBeenCalledTimes(1);
    const [x, y] = setData.mock.calls[0];
    expect(Array.from(x)).toEqual([100, 101, 102]);
    expect(Array.from(y)).toEqual([400 * MiB, 450 * MiB, 512 * MiB]);
    // the RSS is in the card: the footer does not repeat it
    expect(
      dom.host.querySelector('.jp-TorchDbg-memory')!.lastElementChild!
        .textContent
    ).toBe('NVML library not found');
  });

  it("says why the breakdown left other threads' gradients out (R34)", () => {
    const model = new TorchDbgModel();
    const note =
      'training runs on several threads: gradients of models stepped on other threads are not counted';
    const msg = memory({
      breakdown: {
        devices: [
          {
            device: 'cpu',
            parameters: 4 * MiB,
            gradients: MiB,
            optimizer_state: 0,
            other: 100 * MiB,
            total: 105 * MiB,
            total_source: 'rss'
          }
        ],
        models: ['m0', 'm1'],
        optimizers: ['opt0', 'opt1'],
        tensors: 8,
        truncated: false,
        reason: null,
        cost_ms: 0.2,
        skipped_grads: 4,
        note
      }
    });
    expect(memoryMessage(msg)).toBe(true);
    model.memory.apply(msg);
    render(model, fakeConn(() => ({}) as IAck).conn);
    expect(
      dom.host.querySelector('.jp-TorchDbg-breakdownNote')!.textContent
    ).toBe(note);
  });

  it('says the timeline fills while a cell runs when there is no point yet', () => {
    const model = new TorchDbgModel();
    model.memory.apply(memory());
    render(model, fakeConn(() => ({}) as IAck).conn);
    expect(
      dom.host.querySelector('.jp-TorchDbg-rssCard')!.textContent
    ).toContain('fills while a cell runs');
  });

  it('has no RSS card when device cards show the timeline', () => {
    const model = new TorchDbgModel();
    model.memory.apply(
      memory({
        state: 'active',
        reason: null,
        devices: [cudaDevice()]
      })
    );
    render(model, fakeConn(() => ({}) as IAck).conn);
    expect(dom.host.querySelector('.jp-TorchDbg-rssCard')).toBeNull();
    expect(
      dom.host.querySelector(
        '.jp-TorchDbg-deviceCard[data-device="cuda:0"] .jp-TorchDbg-chart'
      )
    ).not.toBeNull();
    // no interval peak from this kernel: no caption
    expect(dom.host.querySelector('.jp-TorchDbg-peakNote')).toBeNull();
  });

  it('says under the chart how the interval peak is sampled (#24)', () => {
    const model = new TorchDbgModel();
    const status = memory({
      state: 'active',
      reason: null,
      devices: [
        cudaDevice({
          series: {
            allocated: 'mem/cuda:0/allocated',
            reserved: 'mem/cuda:0/reserved',
            peak: 'mem/cuda:0/peak',
            inactive_split: 'mem/cuda:0/inactive_split',
            nvml_used: 'mem/cuda:0/nvml_used',
            peak_interval: 'mem/cuda:0/peak_interval'
          },
          peak_note:
            'peak in interval: exact where a new high was set, else sampled'
        })
      ]
    });
    expect(memoryMessage(status)).toBe(true);
    model.memory.apply(status);
    render(model, fakeConn(() => ({}) as IAck).conn);
    expect(
      dom.host.querySelector(
        '.jp-TorchDbg-deviceCard[data-device="cuda:0"] .jp-TorchDbg-peakNote'
      )!.textContent
    ).toBe('peak in interval: exact where a new high was set, else sampled');
  });
});

describe('useMounted', () => {
  class Thing {
    static made = 0;
    static disposed = 0;
    readonly node = document.createElement('span');
    constructor(readonly key: string) {
      Thing.made++;
      this.node.className = 'thing';
      this.node.textContent = key;
    }
    dispose(): void {
      Thing.disposed++;
    }
  }

  function Host(props: { k: string }): ReactT.ReactElement {
    const [ref, obj] = useMounted(() => new Thing(props.k), [props.k]);
    return React.createElement('div', {
      ref,
      'data-current': obj.current?.key ?? ''
    });
  }

  it('mounts the object in the host, remakes it when deps change, disposes on unmount', () => {
    dom.render(React.createElement(Host, { k: 'a' }));
    expect(dom.host.querySelectorAll('.thing')).toHaveLength(1);
    expect(dom.host.querySelector('.thing')!.textContent).toBe('a');
    dom.render(React.createElement(Host, { k: 'a' }));
    expect([Thing.made, Thing.disposed]).toEqual([1, 0]);
    dom.render(React.createElement(Host, { k: 'b' }));
    expect([Thing.made, Thing.disposed]).toEqual([2, 1]);
    expect(
      Array.from(dom.host.querySelectorAll('.thing')).map(n => n.textContent)
    ).toEqual(['b']);
    dom.render(React.createElement('p'));
    expect([Thing.made, Thing.disposed]).toEqual([2, 2]);
    expect(dom.host.querySelector('.thing')).toBeNull();
  });
});
