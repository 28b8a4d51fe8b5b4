/**
 * @jest-environment jsdom
 *
 * The Ranks section (protocol 2.4) fed `ranks` messages that the schema accepts:
 * the model replaces points on `replay` and appends them otherwise, starts
 * afresh for a new job, orders alarms oldest first and says which rank is in
 * trouble; the panel shows nothing before a job, then the job line, one grid
 * row per rank with a readable state, the rank alarms (root cause first, a
 * hang's stack on demand), and buttons that send the `ranks_*` actions and show
 * the ack ("clip 1 applies at step 57 on ranks 0, 1") or the refusal; they are
 * off, with the reason, once the job has ended. A worker's exception names its
 * rank.
 */
import { act, mountEach, React } from './dom';
import type { TorchDbgConnection } from '../connection/connection';
import { routeMessage } from '../connection/router';
import { TorchDbgModel } from '../model/model';
import type { ExceptionPanel as ExceptionPanelT } from '../panels/exception/body';
import { exceptionReport } from '../panels/exception/report';
import type { RanksPanel as RanksPanelT } from '../panels/ranks/body';
import type { alignRanks as alignRanksT } from '../panels/ranks/charts';
import { formatSeconds } from '../panels/ranks/format';
import { type RankNow, RanksModel } from '../panels/ranks/model';
import { gradsEmptyText } from '../panels/grads/emptyText';
import { describeRanksAck } from '../panels/ranks/send';
import type {
  IRankAlarm,
  IRankJob,
  IRankPoints,
  IRankState,
  IRanks
} from '../protocol/generated';
import type { IAck, IControl, IError, IException } from '../protocol/messages';
import { hello } from './fakeKernel';
import { schemaDef } from './schema';
import { trans } from './translate';
import type { RanksSection as RanksSectionT } from '../sidebar/ranksSection';
import type * as NowStripT from '../sidebar/nowStrip';

/** What the palette commands told the user (apputils' Notification, recorded). */
const mockNotices: string[] = [];
jest.mock('@jupyterlab/apputils', () => {
  const note = (kind: string) => (message: string) =>
    mockNotices.push(`${kind}: ${message}`);
  return {
    Notification: {
      info: note('info'),
      error: note('error'),
      warning: note('warning')
    },
    // the clip dialog: max_norm 2 accepted
    InputDialog: {
      getNumber: () => Promise.resolve({ button: { accept: true }, value: 2 })
    }
  };
});

/* eslint-disable @typescript-eslint/no-require-imports */
const {
  RanksPanel
}: { RanksPanel: typeof RanksPanelT } = require('../panels/ranks/body');
const {
  alignRanks
}: { alignRanks: typeof alignRanksT } = require('../panels/ranks/charts');
const {
  RanksSection
}: { RanksSection: typeof RanksSectionT } = require('../sidebar/ranksSection');
const {
  ExceptionPanel
}: {
  ExceptionPanel: typeof ExceptionPanelT;
} = require('../panels/exception/body');
const {
  NowStrip,
  nowFigures
}: typeof NowStripT = require('../sidebar/nowStrip');
/* eslint-enable @typescript-eslint/no-require-imports */

const ranksMessage = schemaDef('Ranks');
const kernelMessage = schemaDef('KernelMessage');
const actionMessage = schemaDef('Action');
const ackMessage = schemaDef('Ack');
const errorMessage = schemaDef('Error');
const exceptionMessage = schemaDef('Exception');

function valid<T>(validate: typeof ranksMessage, msg: T): T {
  if (!validate(msg)) {
    throw new Error(JSON.stringify(validate.errors, null, 1));
  }
  return msg;
}

function job(over: Partial<IRankJob> = {}): IRankJob {
  return {
    id: 1,
    started: 1_700_000_000,
    world_size: 2,
    state: 'running',
    transport: 'ipc',
    paused_at: null,
    pending: null,
    ...over
  };
}

function rank(r: number, over: Partial<IRankState> = {}): RankNow {
  return {
    rank: r,
    identity: {
      rank: r,
      world_size: 2,
      local_rank: r,
      host: 'node-a',
      pid: 1000 + r,
      launcher: 'spawn'
    },
    state: 'running',
    step: 40,
    step_time_s: 0.0125,
    own_time_s: 0.004,
    grad_norm: 0.75,
    grad_step: 40,
    memory_bytes: 12 * 1024 * 1024,
    memory_kind: 'host',
    last_seen_s: 0.1,
    since_step_s: 0.01,
    clip: null,
    lr_scale: 1,
    phase: 'user',
    ...over
  };
}

function points(r: number, steps: number[], norm = 0.5): IRankPoints {
  return {
    rank: r,
    steps,
    step_time_s: steps.map(() => 0.01),
    grad_norm: steps.map(s => norm + s / 1000),
    memory_bytes: steps.map(() => 1024)
  };
}

function alarm(over: Partial<IRankAlarm> = {}): IRankAlarm {
  return {
    id: 'a1',
    kind: 'straggler',
    rank: 1,
    step: 30,
    time: 1_700_000_010,
    message: 'rank 1 takes 80 ms of its own per step; the others 10 ms',
    stack: [],
    ...over
  };
}

/** A `ranks` message the schema accepts (2 running ranks, no points, no alarms). */
function ranks(over: Partial<IRanks> = {}): IRanks {
  return valid(ranksMessage, {
    method: 'ranks',
    replay: false,
    job: job(),
    ranks: [rank(0), rank(1)],
    points: [],
    alarms: [],
    endpoint: { transport: 'ipc', refused: 0 },
    ...over
  } as IRanks);
}

describe('ranks model', () => {
  it('appends new points, and replaces them all on replay', () => {
    const m = new RanksModel();
    m.apply(ranks({ points: [points(0, [1, 2]), points(1, [1, 2])] }));
    m.apply(ranks({ points: [points(0, [3]), points(1, [3, 4])] }));
    expect(m.seriesOf(0)!.steps).toEqual([1, 2, 3]);
    expect(m.seriesOf(1)!.steps).toEqual([1, 2, 3, 4]);
    expect(m.seriesOf(1)!.gradNorm[3]).toBeCloseTo(0.504);
    // a batch the rank sent again is not drawn twice
    m.apply(ranks({ points: [points(0, [2, 3, 4])] }));
    expect(m.seriesOf(0)!.steps).toEqual([1, 2, 3, 4]);
    const v = m.version;
    m.apply(
      ranks({
        replay: true,
        points: [points(0, [10, 11]), points(1, [10, 11])]
      })
    );
    expect(m.seriesOf(0)!.steps).toEqual([10, 11]);
    expect(m.seriesOf(1)!.steps).toEqual([10, 11]);
    expect(m.version).toBeGreaterThan(v);
    // a replay without a rank's points forgets that rank's
    m.apply(ranks({ replay: true, points: [points(0, [12])] }));
    expect(m.seriesOf(1)).toBeUndefined();
  });

  it('starts afresh for a new job, and forgets it when the kernel says none', () => {
    const m = new RanksModel();
    m.apply(ranks({ points: [points(0, [1, 2, 3])] }));
    m.note = { kind: 'ack', action: 'ranks_pause', text: 'paused' };
    m.apply(ranks({ job: job({ id: 2 }), points: [points(0, [1])] }));
    expect(m.job!.id).toBe(2);
    expect(m.seriesOf(0)!.steps).toEqual([1]);
    expect(m.note).toBeNull();
    // the job ends: the last action's outcome goes with it
    m.note = {
      kind: 'ack',
      action: 'ranks_resume',
      text: 'resumed ranks 0, 1'
    };
    m.apply(ranks({ job: job({ id: 2, state: 'ended' }) }));
    expect(m.note).toBeNull();
    m.apply(ranks({ job: null, ranks: [] }));
    expect(m.job).toBeNull();
    expect(m.series).toEqual([]);
  });

  it('non-finite norms on the wire become NaN / Infinity points', () => {
    const m = new RanksModel();
    const p = points(0, [1, 2, 3]);
    p.grad_norm = ['NaN', 'Infinity', null];
    m.apply(ranks({ points: [p] }));
    const g = m.seriesOf(0)!.gradNorm;
    expect(Number.isNaN(g[0])).toBe(true);
    expect(g[1]).toBe(Infinity);
    expect(Number.isNaN(g[2])).toBe(true);
  });

  it('orders ranks by number and alarms oldest first (the root cause first)', () => {
    const m = new RanksModel();
    m.apply(
      ranks({
        ranks: [rank(1), rank(0)],
        alarms: [
          alarm({ id: 'late', kind: 'hang', rank: 0, time: 30 }),
          alarm({ id: 'root', kind: 'failed', rank: 1, time: 10 }),
          alarm({ id: 'mid', kind: 'lost', rank: 1, time: 20 })
        ]
      })
    );
    expect(m.ranks.map(r => r.identity.rank)).toEqual([0, 1]);
    expect(m.alarms.map(a => a.id)).toEqual(['root', 'mid', 'late']);
  });

  it('says why a rank stands out: its state first, then its newest alarm', () => {
    const m = new RanksModel();
    m.apply(
      ranks({
        ranks: [
          rank(0, { state: 'waiting', phase: 'torch_wait' }),
          rank(1, { state: 'stalled' })
        ],
        alarms: [alarm({ rank: 0, kind: 'desync', layer: 'fc.weight' })]
      })
    );
    expect(m.trouble(0)).toBe('desync');
    expect(m.trouble(1)).toBe('stalled');
    m.apply(ranks({ alarms: [alarm({ rank: 1 })] }));
    expect(m.trouble(0)).toBeNull();
    expect(m.trouble(1)).toBe('straggler');
    m.apply(ranks({ ranks: [rank(0), rank(1, { state: 'failed' })] }));
    expect(m.trouble(1)).toBe('failed');
  });

  it('a gradient alarm singles out a rank only when that rank is to blame', () => {
    const m = new RanksModel();
    m.apply(
      ranks({
        alarms: [
          alarm({
            id: 'n',
            kind: 'non_finite',
            rank: 1,
            step: 26,
            cause: 'input',
            ranks: [0, 1],
            layer: 'model'
          })
        ]
      })
    );
    expect(m.trouble(1)).toBe('non_finite'); // its own batch made it
    expect(m.trouble(0)).toBeNull(); // it holds it only through the all-reduce
    m.apply(
      ranks({
        alarms: [
          alarm({
            kind: 'non_finite',
            rank: 0,
            cause: 'backward',
            ranks: [0, 1]
          }),
          alarm({ id: 'e', kind: 'explosion', rank: 0, ranks: [0, 1] })
        ]
      })
    );
    expect(m.trouble(0)).toBeNull(); // which rank cannot be told
    m.apply(
      ranks({ alarms: [alarm({ kind: 'explosion', rank: 1, ranks: [1] })] })
    );
    expect(m.trouble(1)).toBe('explosion');
  });

  it('clip and LR scale are those of the live ranks; paused ranks are listed', () => {
    const m = new RanksModel();
    m.apply(
      ranks({
        ranks: [
          rank(0, { clip: 1, lr_scale: 0.5, state: 'paused', phase: 'paused' }),
          rank(1, { clip: 1, lr_scale: 0.5 })
        ]
      })
    );
    expect(m.clip).toBe(1);
    expect(m.lrScale).toBe(0.5);
    expect(m.pausedRanks).toEqual([0]);
    m.apply(ranks({ ranks: [rank(0, { clip: 1 }), rank(1)] }));
    expect(m.clip).toBeNull(); // not every rank clips: not "clip 1"
  });

  it('while a rank job runs, the gradient section points to Ranks', () => {
    const model = new TorchDbgModel();
    model.ranks.apply(ranks());
    expect(gradsEmptyText(model, trans)).toBe(
      'This kernel does not train: a 2-rank job does. Its gradient norms are in Ranks.'
    );
  });

  it('a `ranks` message reaches the ranks model through the router', () => {
    const model = new TorchDbgModel();
    const msg = ranks({ points: [points(0, [1])] });
    expect(kernelMessage(msg)).toBe(true);
    expect(routeMessage(model, msg, [], null)).toEqual({ kind: 'message' });
    expect(model.ranks.job!.world_size).toBe(2);
    model.reset();
    expect(model.ranks.job).toBeNull();
  });

  /** A rank as a broadcast above 16 ranks sends it once its identity was sent. */
  function known(r: number, over: Partial<IRankState> = {}): IRankState {
    const state: IRankState = rank(r, over);
    delete state.identity;
    return state;
  }

  it('keeps each rank identity between broadcasts that leave it out (2.8)', () => {
    const m = new RanksModel();
    const first = [0, 1].map(r =>
      rank(r, { identity: { ...rank(r).identity, host: `node-${r}` } })
    );
    expect(m.apply(ranks({ ranks: first }))).toBe(true);
    const next = ranks({ ranks: [known(1, { step: 41 }), known(0)] });
    expect(next.ranks.every(r => r.identity === undefined)).toBe(true);
    expect(m.apply(next)).toBe(true);
    expect(m.ranks.map(r => [r.rank, r.identity.host, r.step])).toEqual([
      [0, 'node-0', 40],
      [1, 'node-1', 41]
    ]);
    // a changed identity replaces the kept one
    const moved = rank(1, { identity: { ...rank(1).identity, pid: 77 } });
    expect(m.apply(ranks({ ranks: [known(0), moved] }))).toBe(true);
    expect(m.apply(ranks({ ranks: [known(0), known(1)] }))).toBe(true);
    expect(m.ranks[1].identity.pid).toBe(77);
    expect(m.ranks[0].identity.host).toBe('node-0');
  });

  it('a rank without a kept identity asks for the snapshot; a new job forgets them', () => {
    const model = new TorchDbgModel();
    expect(routeMessage(model, ranks(), [], null)).toEqual({ kind: 'message' });
    // the same job: identities kept
    const again = ranks({ ranks: [known(0), known(1)] });
    expect(routeMessage(model, again, [], null)).toEqual({ kind: 'message' });
    // a new job: the panel has none of its ranks' identities yet
    const other = ranks({ job: job({ id: 2 }), ranks: [known(0), known(1)] });
    expect(routeMessage(model, other, [], null)).toEqual({
      kind: 'message',
      resync: true
    });
    // shown meanwhile by number, with no host
    expect(
      model.ranks.ranks.map(r => [r.identity.rank, r.identity.host])
    ).toEqual([
      [0, ''],
      [1, '']
    ]);
    // the snapshot (replay) has them all
    const replay = ranks({ job: job({ id: 2 }), replay: true });
    expect(routeMessage(model, replay, [], null)).toEqual({ kind: 'message' });
    expect(model.ranks.ranks.map(r => r.identity.host)).toEqual([
      'node-a',
      'node-a'
    ]);
  });
});

describe('ranks formatting', () => {
  it('the ack in words: action, agreed step and the ranks', () => {
    const result = { at_step: 57, ranks: [0, 1] };
    expect(describeRanksAck('ranks_clip', { max_norm: 1 }, result, trans)).toBe(
      'clip 1 applies at step 57 on ranks 0, 1'
    );
    expect(describeRanksAck('ranks_pause', {}, result, trans)).toBe(
      'pause at step 57 on ranks 0, 1'
    );
    expect(
      describeRanksAck('ranks_scale_lr', { factor: 0.5 }, result, trans)
    ).toBe('LR ×0.5 applies at step 57 on ranks 0, 1');
    expect(describeRanksAck('ranks_resume', {}, { ranks: [0, 1] }, trans)).toBe(
      'resumed ranks 0, 1'
    );
    expect(describeRanksAck('ranks_unclip', {}, result, trans)).toBe(
      'clipping stops at step 57 on ranks 0, 1'
    );
    expect(
      describeRanksAck('ranks_pause', {}, { at_step: 3, ranks: [] }, trans)
    ).toBe('pause at step 3 on ranks every rank');
  });

  it('step times in µs, ms or s; unknown as a dash', () => {
    expect(formatSeconds(0.0125)).toBe('12.5 ms');
    expect(formatSeconds(0.0004)).toBe('400 µs');
    expect(formatSeconds(2.5)).toBe('2.5 s');
    expect(formatSeconds(null)).toBe('—');
  });

  it('aligns the ranks on the union of their steps (a gap where one has none)', () => {
    const m = new RanksModel();
    m.apply(ranks({ points: [points(0, [1, 2, 4]), points(1, [1, 3, 4])] }));
    const { x, ys } = alignRanks(m.series, s => s.steps);
    expect(x).toEqual([1, 2, 3, 4]);
    expect(ys[0]).toEqual([1, 2, NaN, 4]);
    expect(ys[1]).toEqual([1, NaN, 3, 4]);
  });
});

/** A connected model and a connection whose actions answer with `reply`. */
function setup(reply: (action: string) => IAck | IError = okReply) {
  const model = new TorchDbgModel();
  model.hello = hello() as unknown as TorchDbgModel['hello'];
  model.state = { kind: 'connected' };
  const sent: { action: string; args: Record<string, unknown> }[] = [];
  const conn = {
    model,
    isConnected: true,
    sendAction: (action: string, args: Record<string, unknown>) => {
      // what the connection would put on the wire must be a valid action
      valid(actionMessage, {
        method: 'action',
        request_id: `r${sent.length}`,
        action,
        args
      });
      sent.push({ action, args });
      return Promise.resolve(reply(action));
    }
  } as unknown as TorchDbgConnection;
  return { model, conn, sent };
}

function okReply(action: string): IAck {
  return valid(ackMessage, {
    method: 'ack',
    request_id: 'r',
    action,
    result:
      action === 'ranks_resume'
        ? { ranks: [0, 1] }
        : { at_step: 57, ranks: [0, 1] }
  } as IAck);
}

function refusal(): IError {
  return valid(errorMessage, {
    method: 'error',
    request_id: 'r',
    code: 'refused',
    message: 'rank 1 did not answer within 2 s; nothing applied'
  } as IError);
}

const dom = mountEach();

const $ = <T extends Element = HTMLElement>(sel: string) =>
  dom.host.querySelector(sel) as T | null;
const $$ = (sel: string) =>
  Array.from(dom.host.querySelectorAll<HTMLElement>(sel));
const button = (label: string) =>
  $$('button').find(b => b.textContent === label) as HTMLButtonElement;

/** The kernel sends a `ranks` message; the panel re-renders at the next frame. */
async function kernelSays(model: TorchDbgModel, msg: IRanks): Promise<void> {
  await act(async () => {
    model.ranks.apply(msg);
    await new Promise(resolve => requestAnimationFrame(resolve));
  });
}

/** Click, let the action's reply arrive and the panel re-render (the next frame). */
async function click(el: HTMLElement): Promise<void> {
  await act(async () => {
    el.click();
    await new Promise(resolve => setTimeout(resolve, 0));
    await new Promise(resolve => requestAnimationFrame(resolve));
  });
}

function type(input: HTMLInputElement, text: string): void {
  const setter = Object.getOwnPropertyDescriptor(
    HTMLInputElement.prototype,
    'value'
  )!.set!;
  act(() => {
    setter.call(input, text);
    input.dispatchEvent(new Event('input', { bubbles: true }));
  });
}

describe('ranks section', () => {
  it('nothing before a job attached; then the section with its alarm count', async () => {
    const { model, conn } = setup();
    dom.render(React.createElement(RanksSection, { conn, trans }));
    expect(dom.host.textContent).toBe('');
    await kernelSays(model, ranks({ job: null, ranks: [] }));
    expect(dom.host.textContent).toBe('');
    await kernelSays(model, ranks({ alarms: [alarm()] }));
    const section = $('[data-section="ranks"]')!;
    expect(
      section.querySelector('.jp-TorchDbg-sectionTitle')!.textContent
    ).toBe('Ranks');
    expect(section.querySelector('.jp-TorchDbg-badge')!.textContent).toBe('1');
  });
});

describe('ranks panel', () => {
  function render(conn: TorchDbgConnection) {
    dom.render(React.createElement(RanksPanel, { conn, trans }));
  }

  it('the job line, and one grid row per rank with its state and figures', async () => {
    const { model, conn } = setup();
    render(conn);
    expect(dom.host.textContent).toBe('');
    await kernelSays(
      model,
      ranks({
        job: job({
          pending: { action: 'clip', at_step: 57, request_id: 'r9' }
        }),
        ranks: [
          rank(0, { state: 'waiting', phase: 'torch_wait' }),
          rank(1, { step: 39, memory_bytes: 3 * 1024 ** 3 })
        ],
        endpoint: { transport: 'ipc', refused: 2 }
      })
    );
    const header = $('.jp-TorchDbg-ranksHeader')!.textContent;
    expect(header).toContain('2 ranks');
    expect(header).toContain('running');
    expect(header).toContain('pending: clip at step 57');
    expect(header).toContain('2 refused');
    const rows = $$('.jp-TorchDbg-rankRow');
    expect(rows.map(r => r.dataset.rank)).toEqual(['0', '1']);
    expect(rows.map(r => r.dataset.state)).toEqual(['waiting', 'running']);
    expect(rows[0].querySelector('.jp-TorchDbg-rankState')!.textContent).toBe(
      'waiting'
    );
    expect(rows[1].querySelector('.jp-TorchDbg-rankStep')!.textContent).toBe(
      'step 39'
    );
    expect(rows[0].querySelector('.jp-TorchDbg-rankTime')!.textContent).toBe(
      '12.5 ms'
    );
    expect(rows[0].querySelector('.jp-TorchDbg-rankOwn')!.textContent).toBe(
      '4 ms'
    );
    expect(rows[0].querySelector('.jp-TorchDbg-rankGrad')!.textContent).toBe(
      '0.75'
    );
    expect(rows[0].querySelector('.jp-TorchDbg-rankMem')!.textContent).toBe(
      '12.0 MiB'
    );
    expect(rows[1].querySelector('.jp-TorchDbg-rankMem')!.textContent).toBe(
      '3.0 GiB'
    );
    expect(
      rows[0].querySelector('.jp-TorchDbg-rankId')!.getAttribute('title')
    ).toContain('pid 1000');
    // fewer ranks attached than the world: said so
    await kernelSays(model, ranks({ ranks: [rank(0)] }));
    expect($('.jp-TorchDbg-ranksHeader')!.textContent).toContain(
      '1 of 2 ranks attached'
    );
  });

  it('a failed, stalled or straggling rank is highlighted and tagged', async () => {
    const { model, conn } = setup();
    model.ranks.apply(
      ranks({
        ranks: [rank(0, { state: 'failed' }), rank(1)],
        alarms: [alarm({ rank: 1, kind: 'straggler' })]
      })
    );
    render(conn);
    const [r0, r1] = $$('.jp-TorchDbg-rankRow');
    expect(r0.classList).toContain('jp-mod-trouble');
    expect(r0.dataset.trouble).toBe('failed');
    expect(r0.querySelector('.jp-TorchDbg-rankState')!.textContent).toBe(
      'failed'
    );
    expect(r1.dataset.trouble).toBe('straggler');
    expect(r1.querySelector('.jp-TorchDbg-rankTrouble')!.textContent).toBe(
      'straggler'
    );
  });

  it('each button sends its ranks_* action; the ack is shown in words', async () => {
    const { model, conn, sent } = setup();
    model.ranks.apply(ranks());
    render(conn);
    type($<HTMLInputElement>('.jp-TorchDbg-ranksClipInput')!, '2.5');
    await click(button('Clip all ranks'));
    expect(sent.pop()).toEqual({
      action: 'ranks_clip',
      args: { max_norm: 2.5 }
    });
    expect($('.jp-TorchDbg-ranksNote')!.textContent).toBe(
      'clip 2.5 applies at step 57 on ranks 0, 1'
    );
    expect($('.jp-TorchDbg-ranksNote')!.dataset.kind).toBe('ack');
    await click(button('Pause all'));
    expect(sent.pop()).toEqual({ action: 'ranks_pause', args: {} });
    expect($('.jp-TorchDbg-ranksNote')!.textContent).toBe(
      'pause at step 57 on ranks 0, 1'
    );
    await click(button('LR ×0.5 all'));
    expect(sent.pop()).toEqual({
      action: 'ranks_scale_lr',
      args: { factor: 0.5 }
    });
    // Unclip and Resume need something to undo
    expect(button('Unclip').disabled).toBe(true);
    expect(button('Unclip').title).toBe('No rank is clipping');
    expect(button('Resume all').disabled).toBe(true);
    await kernelSays(
      model,
      ranks({
        job: job({ paused_at: 57 }),
        ranks: [
          rank(0, { state: 'paused', phase: 'paused', step: 56, clip: 2.5 }),
          rank(1, { state: 'paused', phase: 'paused', step: 56, clip: 2.5 })
        ]
      })
    );
    expect($('.jp-TorchDbg-ranksHeader')!.textContent).toContain(
      'paused at step 57'
    );
    expect($('.jp-TorchDbg-ranksHeader')!.textContent).toContain('clip 2.5');
    expect(button('Pause all').disabled).toBe(true);
    await click(button('Resume all'));
    expect(sent.pop()).toEqual({ action: 'ranks_resume', args: {} });
    expect($('.jp-TorchDbg-ranksNote')!.textContent).toBe('resumed ranks 0, 1');
    await click(button('Unclip'));
    expect(sent.pop()).toEqual({ action: 'ranks_unclip', args: {} });
    // an invalid max norm sends nothing
    type($<HTMLInputElement>('.jp-TorchDbg-ranksClipInput')!, '-1');
    expect(button('Clip all ranks').disabled).toBe(true);
  });

  it('a refusal is shown with the kernel’s reason', async () => {
    const { model, conn } = setup(() => refusal());
    model.ranks.apply(ranks());
    render(conn);
    await click(button('Pause all'));
    const note = $('.jp-TorchDbg-ranksNote')!;
    expect(note.textContent).toBe(
      'rank 1 did not answer within 2 s; nothing applied'
    );
    expect(note.dataset.kind).toBe('refused');
    expect(note.getAttribute('role')).toBe('alert');
  });

  it('an FSDP job: the global norm from the shards, shard norms in the grid, no all-rank clip', async () => {
    const { model, conn } = setup();
    render(conn);
    const sharded = (global: number | null, step: number | null) =>
      ranks({
        job: job({
          sharded: { replicas: 1, global_norm: global, global_step: step }
        }),
        ranks: [
          rank(0, { sharded: true, grad_norm: 0.3 }),
          rank(1, { sharded: true, grad_norm: 0.4 })
        ]
      });
    await kernelSays(model, sharded(null, null));
    expect($('.jp-TorchDbg-ranksGlobalNorm')!.textContent).toBe(
      'Global gradient norm (FSDP): waiting for every rank to read one same step.'
    );
    await kernelSays(model, sharded(0.5, 12));
    expect($('.jp-TorchDbg-ranksGlobalNorm')!.textContent).toBe(
      'Global gradient norm (FSDP, from 2 ranks’ shards): 0.5 at step 12'
    );
    // a live figure: the next message moves it
    await kernelSays(model, sharded(0.61234, 13));
    expect($('.jp-TorchDbg-ranksGlobalNorm')!.textContent).toBe(
      'Global gradient norm (FSDP, from 2 ranks’ shards): 0.6123 at step 13'
    );
    expect($('.jp-TorchDbg-rankHead')!.textContent).toContain('shard');
    expect(button('Clip all ranks').disabled).toBe(true);
    expect(button('Clip all ranks').title).toContain('sharded (FSDP)');
    // a plain DDP job: no such line, the clip on
    await kernelSays(model, ranks());
    expect($('.jp-TorchDbg-ranksGlobalNorm')).toBeNull();
    expect(button('Clip all ranks').disabled).toBe(false);
  });

  it('once the job has ended every action is off, with the reason', async () => {
    const { model, conn, sent } = setup();
    model.ranks.apply(
      ranks({
        job: job({ state: 'ended' }),
        ranks: [rank(0, { state: 'exited' }), rank(1, { state: 'exited' })]
      })
    );
    render(conn);
    expect($('.jp-TorchDbg-ranksHeader')!.textContent).toContain('ended');
    for (const label of [
      'Clip all ranks',
      'Unclip',
      'Pause all',
      'Resume all',
      'LR ×0.5 all'
    ]) {
      expect(button(label).disabled).toBe(true);
      expect(button(label).title).toBe(
        'The job has ended: no rank is left to act on.'
      );
    }
    expect($('.jp-TorchDbg-ranksEnded')!.textContent).toBe(
      'The job has ended: no rank is left to act on.'
    );
    await click(button('Pause all'));
    expect(sent).toEqual([]);
  });

  it('rank alarms: the root cause first, the latest marked, a hang’s stack on demand', async () => {
    const { model, conn } = setup();
    model.ranks.apply(
      ranks({
        alarms: [
          alarm({
            id: 'h',
            kind: 'hang',
            rank: 1,
            step: 41,
            time: 20,
            message: 'rank 1 has not stepped for 12 s while rank 0 waits',
            stack: [
              'train.py:10 in main: fn()',
              'train.py:20 in fn: time.sleep(60)'
            ]
          }),
          alarm({
            id: 'd',
            kind: 'desync',
            rank: 0,
            time: 10,
            layer: 'fc.weight',
            message: 'rank 0 norm differs'
          })
        ]
      })
    );
    render(conn);
    const items = $$('.jp-TorchDbg-rankAlarm');
    expect(items.map(i => i.dataset.kind)).toEqual(['desync', 'hang']);
    expect(items[0].textContent).toContain('first: likely the cause');
    expect(items[0].textContent).toContain(
      'first layer that differs: fc.weight'
    );
    expect(items[1].classList).toContain('jp-mod-latest');
    expect(items[1].textContent).toContain('rank 1 · hang · step 41');
    const details = items[1].querySelector('details')!;
    expect(details.open).toBe(false);
    expect(details.querySelector('summary')!.textContent).toBe(
      'stack of rank 1 (2 frames)'
    );
    expect(details.querySelector('pre')!.textContent).toBe(
      'train.py:10 in main: fn()\ntrain.py:20 in fn: time.sleep(60)'
    );
  });

  it('a non-finite alarm: its kind, the rank it began on, where, the ranks it reached, the fix', async () => {
    const { model, conn } = setup();
    model.ranks.apply(
      ranks({
        alarms: [
          alarm({
            id: 'n',
            kind: 'non_finite',
            rank: 1,
            step: 26,
            message:
              'Non-finite gradient at step 26, from rank 1: the input batch of model holds NaN: `input` (32x8) at index [3, 0].',
            layer: 'model',
            cause: 'input',
            ranks: [0, 1],
            remedy: 'check how that tensor is built on this rank'
          })
        ]
      })
    );
    render(conn);
    const item = $('.jp-TorchDbg-rankAlarm')!;
    expect(item.classList).toContain('jp-mod-error');
    expect(item.querySelector('.jp-TorchDbg-rankAlarmWho')!.textContent).toBe(
      'rank 1 · non-finite · step 26'
    );
    expect(item.querySelector('.jp-TorchDbg-rankAlarmLayer')!.textContent).toBe(
      'where: model'
    );
    expect(item.querySelector('.jp-TorchDbg-rankAlarmRanks')!.textContent).toBe(
      'seen on ranks 0, 1'
    );
    expect(
      item.querySelector('.jp-TorchDbg-rankAlarmRemedy')!.textContent
    ).toBe('Fix: check how that tensor is built on this rank');
    const row = $$('.jp-TorchDbg-rankRow').find(r => r.dataset.rank === '1');
    expect(row?.dataset.trouble).toBe('non_finite');
  });

  it('a hang’s stack: the user’s frames open, the library’s collapsed after them', async () => {
    const { model, conn } = setup();
    model.ranks.apply(
      ranks({
        alarms: [
          alarm({
            id: 'h',
            kind: 'hang',
            rank: 1,
            step: 4,
            message:
              'Hang: rank 1 has not stepped for 3 s. It is in train.py:20 in fn: q.get(), inside threading.py:320 in wait: waiter.acquire()',
            stack: [
              'train.py:10 in main: fn()',
              'train.py:20 in fn: q.get()',
              'multiprocessing/process.py:108 in run: self._target()',
              'threading.py:320 in wait: waiter.acquire()'
            ],
            stack_user: 2
          })
        ]
      })
    );
    render(conn);
    const stack = $('.jp-TorchDbg-rankStack')!;
    expect(stack.querySelector('summary')!.textContent).toBe(
      'stack of rank 1 (4 frames)'
    );
    expect(stack.querySelector('pre.jp-mod-user')!.textContent).toBe(
      'train.py:10 in main: fn()\ntrain.py:20 in fn: q.get()'
    );
    const library = stack.querySelector<HTMLDetailsElement>(
      '.jp-TorchDbg-rankStackLibrary'
    )!;
    expect(library.open).toBe(false);
    expect(library.querySelector('summary')!.textContent).toBe(
      '2 library frames'
    );
    expect(library.querySelector('pre')!.textContent).toBe(
      'multiprocessing/process.py:108 in run: self._target()\nthreading.py:320 in wait: waiter.acquire()'
    );
  });

  it('charts one line per rank once points arrived, with a legend', async () => {
    const { model, conn } = setup();
    render(conn);
    await kernelSays(model, ranks());
    expect($('.jp-TorchDbg-rankCharts')).toBeNull();
    await kernelSays(
      model,
      ranks({ points: [points(0, [1, 2]), points(1, [1, 2])] })
    );
    expect($$('.jp-TorchDbg-rankChart').length).toBe(2);
    expect($$('.jp-TorchDbg-rankLegend li').map(li => li.textContent)).toEqual([
      'rank 0',
      'rank 1'
    ]);
  });
});

/** A `control` message of a kernel whose own loop is idle. */
function idleControl(): IControl {
  return valid(schemaDef('Control'), {
    method: 'control',
    clip: null,
    paused: false,
    paused_at: null,
    step: 0,
    lr_scale: null,
    optimizers: [],
    last_refusal: null,
    idle: true,
    run: null
  } as IControl);
}

describe('the Now strip during a distributed job', () => {
  it('while the kernel itself is idle: the job’s size, its slowest rank’s step and its alarms', async () => {
    const { model } = setup();
    expect(nowFigures(model).ranks).toBeNull();
    model.control.apply(idleControl());
    model.ranks.apply(
      ranks({
        ranks: [rank(0, { step: 40 }), rank(1, { step: 38 })],
        alarms: [alarm()]
      })
    );
    expect(nowFigures(model).ranks).toEqual({ size: 2, step: 38, alarms: 1 });
    const shown: string[] = [];
    dom.render(
      React.createElement(NowStrip, {
        model,
        trans,
        onShowAlarms: () => shown.push('grads'),
        onShowRankAlarms: () => shown.push('ranks')
      })
    );
    // no run of the kernel's own: the strip shows the job, not "Idle"
    expect($('.jp-TorchDbg-nowIdle')).toBeNull();
    expect($('.jp-TorchDbg-nowRanks')!.textContent).toBe('2 ranks · step38');
    const count = $<HTMLButtonElement>('.jp-TorchDbg-nowAlarms')!;
    expect(count.textContent).toBe('1 alarm');
    await click(count);
    expect(shown).toEqual(['ranks']);
    // the job ended: back to the kernel's own state
    await kernelSays(model, ranks({ job: job({ state: 'ended' }) }));
    expect(nowFigures(model).ranks).toBeNull();
    expect($('.jp-TorchDbg-nowIdle')).not.toBeNull();
  });
});

describe('palette commands for every rank', () => {
  it('send the ranks_* actions and note the ack; off once the job has ended', async () => {
    /* eslint-disable @typescript-eslint/no-require-imports */
    const { CommandRegistry } = require('@lumino/commands');
    const { addRanksCommands } = require('../commands/ranks');
    const { CommandIDs } = require('../commands/ids');
    /* eslint-enable @typescript-eslint/no-require-imports */
    const { model, conn, sent } = setup();
    const commands = new CommandRegistry();
    addRanksCommands({ app: { commands }, tracker: { current: conn }, trans });
    expect(commands.isEnabled(CommandIDs.ranksPause)).toBe(false); // no job yet
    model.ranks.apply(ranks());
    expect(commands.isEnabled(CommandIDs.ranksPause)).toBe(true);
    expect(commands.isEnabled(CommandIDs.ranksUnclip)).toBe(false);
    await commands.execute(CommandIDs.ranksPause);
    expect(sent.pop()).toEqual({ action: 'ranks_pause', args: {} });
    expect(model.ranks.note!.text).toBe('pause at step 57 on ranks 0, 1');
    expect(mockNotices.pop()).toBe('info: pause at step 57 on ranks 0, 1');
    await commands.execute(CommandIDs.ranksClip);
    expect(sent.pop()).toEqual({ action: 'ranks_clip', args: { max_norm: 2 } });
    expect(mockNotices.pop()).toBe(
      'info: clip 2 applies at step 57 on ranks 0, 1'
    );
    await commands.execute(CommandIDs.ranksHalveLr);
    expect(sent.pop()).toEqual({
      action: 'ranks_scale_lr',
      args: { factor: 0.5 }
    });
    await commands.execute(CommandIDs.ranksResume);
    expect(sent.pop()).toEqual({ action: 'ranks_resume', args: {} });
    model.ranks.apply(ranks({ job: job({ state: 'ended' }) }));
    for (const id of [
      CommandIDs.ranksClip,
      CommandIDs.ranksPause,
      CommandIDs.ranksResume,
      CommandIDs.ranksHalveLr
    ]) {
      expect(commands.isEnabled(id)).toBe(false);
    }
  });
});

describe('a worker’s exception', () => {
  const exc: IException = valid(exceptionMessage, {
    method: 'exception',
    id: 's-7',
    time: 1,
    replay: false,
    execution_count: 3,
    cell_id: 'c1',
    debuggable: false,
    exception: {
      type: 'RuntimeError',
      module: 'builtins',
      message: 'rank 1 exploded',
      message_truncated: false
    },
    diagnosis: {
      category: 'generic',
      title: 'RuntimeError',
      headline: 'rank 1 exploded',
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
    rank: {
      rank: 1,
      world_size: 2,
      local_rank: 1,
      host: 'node-a',
      pid: 1234,
      launcher: 'spawn'
    }
  } as IException);

  it('names the rank in the exception view and in the report', () => {
    const model = new TorchDbgModel();
    model.exception.apply(exc);
    const actions = {
      goToFrame: () => Promise.resolve(''),
      debug: () => Promise.resolve(''),
      copyReport: () => Promise.resolve()
    };
    dom.render(
      React.createElement(ExceptionPanel, { model, actions, trans } as never)
    );
    const line = $('.jp-TorchDbg-excRank')!;
    expect(line.textContent).toBe('Rank 1 of 2 · node-a · pid 1234');
    expect(line.dataset.rank).toBe('1');
    const debug = Array.from(dom.host.querySelectorAll('button')).find(
      b => b.textContent === 'Debug'
    )!;
    expect(debug.disabled).toBe(true);
    expect(debug.title).toContain('raised in the process of rank 1');
    expect(exceptionReport(exc)).toContain('Rank 1 of 2 · node-a · pid 1234');
  });
});
