/**
 * @jest-environment jsdom
 *
 * Panel state that tells the truth (issue #22, R04):
 * - an exception folds to one line once a later cell finished without error or
 *   a run started after it, and shows in full again for a new exception;
 * - Dismiss is remembered per exception id, so coming back to a kernel (a new
 *   comm whose snapshot re-sends the last exception) does not bring it back;
 * - `%unload_ext` then `%load_ext` by hand: the kernel side announces itself
 *   on `jupyterlab_torchdbg.loaded` and the panel reattaches, without running
 *   any code itself.
 */
import { act, mountEach, React } from './dom';
import { Signal } from '@lumino/signaling';

import { listenForLoads } from '../connection/announce';
import { CellOutcomes, kernelTime } from '../connection/cellOutcomes';
import { TorchDbgConnection } from '../connection/connection';
import { ISessionWidget, KernelTracker } from '../connection/tracker';
import { TorchDbgModel } from '../model/model';
import { IDismissedStore } from '../panels/exception/dismissed';
import { ExceptionModel } from '../panels/exception/model';
import type { IException } from '../protocol/messages';
import { LOADED_TARGET, PROTOCOL_VERSION } from '../protocol/version';
import { FakeKernel, flush, loadedKernel } from './fakeKernel';
import { schemaDef } from './schema';
import { trans } from './translate';

/* eslint-disable @typescript-eslint/no-require-imports */
const { ExceptionPanel } = require('../panels/exception/body');
/* eslint-enable @typescript-eslint/no-require-imports */

const exceptionMessage = schemaDef('Exception');
const loadedMessage = schemaDef('Loaded');

/** Captured at t = 1000 s (kernel clock), in In [4]. */
function exception(over: Partial<IException> = {}): IException {
  const msg: IException = {
    method: 'exception',
    id: 's1-1',
    time: 1000,
    replay: false,
    execution_count: 4,
    cell_id: 'c4',
    debuggable: true,
    exception: {
      type: 'RuntimeError',
      module: 'builtins',
      message: 'Size mismatch between tensors\nsecond line',
      message_truncated: false
    },
    diagnosis: {
      category: 'shape_mismatch',
      title: 'Size mismatch',
      headline: '100 samples, 90 labels',
      culprits: [],
      remedy: null,
      hints: [],
      facts: {},
      confidence: 'likely',
      links: [],
      where: null
    },
    frames: [],
    focus: null,
    frames_total: 0,
    elided: [],
    chain: [],
    truncated: false,
    ...over
  };
  if (!exceptionMessage(msg)) {
    throw new Error(JSON.stringify(exceptionMessage.errors));
  }
  return msg;
}

/** A dismissed-id store of this test only (the real one is localStorage). */
function store(): IDismissedStore {
  const ids = new Set<string>();
  return { has: id => ids.has(id), add: id => void ids.add(id) };
}

const iso = (s: number) => new Date(s * 1000).toISOString();

describe('an earlier exception folds once something ran after it', () => {
  it('a later cell that finished without error folds it; one that failed does not', () => {
    const kernel = new FakeKernel();
    const outcomes = new CellOutcomes();
    const m = new ExceptionModel({ dismissed: store() });
    outcomes.finished.connect((_, f) => m.cellFinishedOk(f.time));
    outcomes.watch(kernel as never);
    m.apply(exception());
    expect(m.superseded).toBeNull();
    kernel.runCell('a', { date: iso(999) }); // before the exception: nothing
    expect(m.superseded).toBeNull();
    kernel.runCell('b', { date: iso(1010), error: true }); // failed: nothing
    expect(m.superseded).toBeNull();
    kernel.runCell('c', { date: iso(1020) });
    expect(m.superseded).toBe('cell_ok');
    expect(outcomes.lastOk(kernel.id)).toBe(1020);
    // Show: in full again, until the next exception
    m.expand();
    expect(m.superseded).toBeNull();
    m.apply(exception({ id: 's1-2', time: 1030 }));
    expect(m.superseded).toBeNull();
    kernel.runCell('d', { date: iso(1040) });
    expect(m.superseded).toBe('cell_ok');
  });

  it('a silent execution (the panel’s own %load_ext) does not count', () => {
    const kernel = new FakeKernel();
    const outcomes = new CellOutcomes();
    outcomes.watch(kernel as never);
    // idle without execute_input: a silent request
    kernel.iopubMessage.emit({
      header: { msg_type: 'status', date: iso(2000) },
      parent_header: { msg_id: 'x', msg_type: 'execute_request' },
      content: { execution_state: 'idle' }
    });
    expect(outcomes.lastOk(kernel.id)).toBeNull();
  });

  it('a run that started after it folds it; the run it failed in does not', () => {
    const model = new TorchDbgModel();
    model.exception.apply(exception());
    const run = (id: number, start: number) => ({
      id,
      start,
      end: null,
      reason: 'idle' as const,
      cell_id: null,
      execution_count: null,
      optimizers: ['opt'],
      steps: 3,
      alerts: 0
    });
    model.applyRuns({ method: 'runs', current: 1, runs: [run(1, 990)] });
    expect(model.exception.superseded).toBeNull();
    model.applyRuns({
      method: 'runs',
      current: 2,
      runs: [run(1, 990), run(2, 1005)]
    });
    expect(model.exception.superseded).toBe('run');
  });

  it('reads the kernel clock from the header date', () => {
    expect(kernelTime('2026-12-04T10:00:01.500000Z')).toBe(
      Date.UTC(2026, 11, 4, 10, 0, 1, 500) / 1000
    );
  });
});

const dom = mountEach();

describe('the folded exception view', () => {
  it('is one line with Show and Dismiss; Show unfolds it', async () => {
    const model = new TorchDbgModel();
    model.exception.apply(exception());
    model.exception.cellFinishedOk(1020);
    const actions = {
      goToFrame: () => Promise.resolve(''),
      debug: () => Promise.resolve(''),
      copyReport: () => Promise.resolve()
    };
    dom.render(React.createElement(ExceptionPanel, { model, actions, trans }));
    const view = dom.host.querySelector('.jp-TorchDbg-exception')!;
    expect(view.getAttribute('data-superseded')).toBe('cell_ok');
    expect(view.querySelector('.jp-TorchDbg-excEarlierLine')!.textContent).toBe(
      'RuntimeError: Size mismatch between tensors'
    );
    expect(
      view.querySelector('.jp-TorchDbg-excEarlierWhere')!.textContent
    ).toBe('Earlier error, In [4] · a later cell ran without error');
    expect(view.textContent).not.toContain('second line');
    const buttons = Array.from(view.querySelectorAll('button')).map(
      b => b.textContent
    );
    expect(buttons).toEqual(['Show', 'Dismiss']);
    await act(async () => {
      (view.querySelector('button') as HTMLButtonElement).click();
      await new Promise(resolve => requestAnimationFrame(resolve));
    });
    expect(dom.host.querySelector('.jp-TorchDbg-excTitle')!.textContent).toBe(
      'Size mismatch'
    );
  });
});

describe('Dismiss is remembered per exception', () => {
  it('survives a new connection to the same kernel (switching notebooks and back)', () => {
    const dismissed = store();
    const first = new ExceptionModel({ dismissed });
    first.apply(exception());
    first.dismiss();
    expect(first.current).toBeNull();
    // back to the notebook: a new model, the snapshot re-sends the last exception
    const again = new ExceptionModel({ dismissed });
    again.apply(exception({ replay: true }));
    expect(again.current).toBeNull();
    // a new exception is shown
    again.apply(exception({ id: 's1-2', time: 1100 }));
    expect(again.current?.id).toBe('s1-2');
  });

  it('a kernel restart clears the view without dismissing', () => {
    const dismissed = store();
    const model = new TorchDbgModel();
    (model.exception as unknown as { _dismissed: IDismissedStore })._dismissed =
      dismissed;
    model.exception.apply(exception());
    model.reset();
    expect(model.exception.current).toBeNull();
    expect(dismissed.has('s1-1')).toBe(false);
  });

  it('the default store is this browser’s localStorage, bounded', () => {
    const a = new ExceptionModel();
    a.apply(exception({ id: 'k-1' }));
    a.dismiss();
    expect(JSON.parse(localStorage.getItem(DISMISSED)!)).toContain('k-1');
    const b = new ExceptionModel();
    b.apply(exception({ id: 'k-1', replay: true }));
    expect(b.current).toBeNull();
    for (let i = 0; i < 60; i++) {
      b.apply(exception({ id: `k-x${i}` }));
      b.dismiss();
    }
    expect(JSON.parse(localStorage.getItem(DISMISSED)!)).toHaveLength(50);
  });
});

const DISMISSED = 'jupyterlab_torchdbg:dismissed-exceptions';

/** A notebook whose session context has one kernel. */
function notebook(kernel: FakeKernel): ISessionWidget {
  return {
    title: { label: 'nb.ipynb' },
    sessionContext: {
      kernelChanged: new Signal<unknown, unknown>({}),
      session: { kernel },
      ready: Promise.resolve()
    }
  } as unknown as ISessionWidget;
}

describe('R04: %unload_ext then %load_ext typed by hand', () => {
  it('the panel reattaches when the kernel side announces that it loaded', async () => {
    const kernel = new FakeKernel();
    loadedKernel(kernel);
    const tracker = new KernelTracker({ autoLoad: true });
    const nb = notebook(kernel);
    listenForLoads(nb.sessionContext, id => tracker.kernelLoaded(id));
    expect([...kernel.targets.keys()]).toEqual([LOADED_TARGET]);
    tracker.setWidget(nb);
    await flush();
    const conn = tracker.current!;
    expect(conn.isConnected).toBe(true);
    const executed = kernel.executed.length;

    // %unload_ext: the kernel closes the comm
    kernel.comms[0].closeFromKernel();
    expect(conn.model.state).toEqual({
      kind: 'not_loaded',
      reason: 'The kernel side was unloaded (%unload_ext).'
    });
    // %load_ext by hand: the kernel opens (and closes) its announcement comm
    const data = {
      method: 'loaded',
      protocol_version: PROTOCOL_VERSION,
      session_id: 's2'
    };
    expect(loadedMessage(data)).toBe(true);
    kernel.targets.get(LOADED_TARGET)!({}, { content: { data } });
    await flush();
    expect(conn.isConnected).toBe(true);
    expect(kernel.comms).toHaveLength(2);
    expect(kernel.comms[1].closed).toBe(false);
    // the panel ran no code of its own for it
    expect(kernel.executed.length).toBe(executed);
    tracker.dispose();
  });

  it('an announcement while connected or while connecting changes nothing', async () => {
    const kernel = new FakeKernel();
    loadedKernel(kernel);
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    const connecting = conn.connect();
    conn.reattach(); // the panel's own auto-load announces during connect
    await connecting;
    await flush();
    expect(kernel.comms).toHaveLength(1);
    conn.reattach();
    await flush();
    expect(kernel.comms).toHaveLength(1);
    conn.dispose();
  });
});
