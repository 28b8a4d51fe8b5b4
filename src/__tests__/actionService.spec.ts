import { ActionOutcome } from '../connection/actions';
import { TorchDbgConnection } from '../connection/connection';
import { sendRanksAction } from '../panels/ranks/send';
import { ActionResult } from '../protocol/messages';
import { FakeKernel, hello, loadedKernel } from './fakeKernel';
import { schema } from './schema';
import { trans } from './translate';
import Ajv2020 from 'ajv/dist/2020';

/** A connected connection whose kernel has no subshells (actions wait while busy). */
async function connected(): Promise<{
  conn: TorchDbgConnection;
  kernel: FakeKernel;
}> {
  const kernel = new FakeKernel();
  const caps = hello().capabilities as Record<string, unknown>;
  loadedKernel(kernel, { capabilities: { ...caps, subshells: false } });
  const conn = new TorchDbgConnection({
    kernel: kernel.asKernel(),
    page: null,
    clientId: () => Promise.resolve(null)
  });
  await conn.connect();
  return { conn, kernel };
}

function lastRequest(kernel: FakeKernel): {
  request_id: string;
  action: string;
} {
  const sent = kernel.comms[0].sent as { request_id: string; action: string }[];
  return sent[sent.length - 1];
}

/** The schema's result of `action` (its `x-result`), as an ajv validator. */
function resultSchema(action: string) {
  const ajv = new Ajv2020({ strict: false });
  const ref = schema.$defs.Action.oneOf.find(
    (r: { $ref: string }) =>
      schema.$defs[r.$ref.replace('#/$defs/', '')].properties.action.const ===
      action
  );
  const def = schema.$defs[ref.$ref.replace('#/$defs/', '')];
  return ajv.compile({ $defs: schema.$defs, ...def['x-result'] });
}

describe('typed replies', () => {
  it('an ack resolves to the result type its action has in the schema', async () => {
    const { conn, kernel } = await connected();
    const p = conn.actions.send('ranks_clip', { max_norm: 1 });
    const result = { at_step: 57, ranks: [0, 1] };
    expect(resultSchema('ranks_clip')(result)).toBe(true);
    kernel.comms[0].deliver({
      method: 'ack',
      request_id: lastRequest(kernel).request_id,
      action: 'ranks_clip',
      result
    });
    const outcome: ActionOutcome<'ranks_clip'> = await p;
    expect(outcome.ok).toBe(true);
    if (!outcome.ok) {
      return;
    }
    // the fields are typed: a number and a number[]; no other field exists
    const step: number = outcome.result.at_step;
    const ranks: number[] = outcome.result.ranks;
    // @ts-expect-error the schema gives ranks_clip no `message` (fails to compile if results are untyped)
    expect(outcome.result.message).toBeUndefined();
    expect([step, ranks]).toEqual([57, [0, 1]]);
  });

  it('the result schemas are what the generated types say', () => {
    const unclip: ActionResult<'unclip'> = { clip: null };
    const pause: ActionResult<'pause'> = {
      paused: true,
      applies: 'at the next optimizer step'
    };
    const resume: ActionResult<'ranks_resume'> = { ranks: [1] };
    expect(resultSchema('unclip')(unclip)).toBe(true);
    expect(resultSchema('pause')(pause)).toBe(true);
    expect(resultSchema('ranks_resume')(resume)).toBe(true);
    // drift: a missing field, a wrong type, an extra field
    expect(resultSchema('ranks_pause')({ ranks: [0] })).toBe(false);
    expect(resultSchema('clip')({ clip: '1', applies: 'x' })).toBe(false);
    expect(resultSchema('resume')({ paused: false, at: 3 })).toBe(false);
  });

  it('a record_memory stop resolves to its snapshot shape, told apart by its fields', async () => {
    const { conn, kernel } = await connected();
    const p = conn.actions.send('record_memory', { op: 'stop' });
    const site = {
      file: 'w/train.py',
      line: 7,
      function: 'step',
      bytes: 8192,
      count: 1
    };
    const result: ActionResult<'record_memory'> = {
      state: 'off',
      max_entries: null,
      since: null,
      time: 1700000000.5,
      file: 'torchdbg_memory_20261205-170000.pickle',
      bytes: 240,
      entries: 2,
      oom_events: 1,
      top_sites: [site],
      live_sites: [site]
    };
    expect(resultSchema('record_memory')(result)).toBe(true);
    kernel.comms[0].deliver({
      method: 'ack',
      request_id: lastRequest(kernel).request_id,
      action: 'record_memory',
      result
    });
    const outcome = await p;
    expect(outcome.ok).toBe(true);
    if (!outcome.ok) {
      return;
    }
    const r = outcome.result;
    // a union of the four shapes: `file` only on the one that wrote a snapshot
    // @ts-expect-error `file` is not on every shape (a start, an armed stop)
    expect(r.file).toBeDefined();
    if (!('file' in r)) {
      throw new Error('the snapshot shape has a file');
    }
    const file: string = r.file;
    const top: number = r.top_sites[0].bytes;
    expect([file, top, r.state]).toEqual([
      'torchdbg_memory_20261205-170000.pickle',
      8192,
      'off'
    ]);
  });

  it('the memory, record and export results are what the generated types say', () => {
    const row = {
      device: 'cuda:0',
      allocated_before: 2,
      allocated_after: 1,
      reserved_before: 8,
      reserved_after: 4
    };
    const empty: ActionResult<'empty_cache'> = {
      devices: [row],
      freed_bytes: 4
    };
    const released: ActionResult<'release_refs'> = {
      cleared: ['sys.last_traceback', 'Out/_/__/___'],
      collected: 3,
      devices: [],
      rss_before: 100,
      rss_after: null,
      note: '%debug on the last error is no longer possible'
    };
    const armed: ActionResult<'record_memory'> = {
      state: 'armed',
      max_entries: 100000,
      since: null,
      note: 'starts when your code first uses CUDA'
    };
    const saved: ActionResult<'save_checkpoint'> = {
      file: 'c.pt',
      bytes: 10,
      models: ['model'],
      optimizers: ['opt'],
      overwritten: false
    };
    const guard: ActionResult<'set_memory_guard'> = {
      guard: { pause_at: 0.9, limit: 1024, limit_source: 'host', tripped: null }
    };
    const measured: ActionResult<'measure_activations'> = { state: 'failed' };
    const opened: ActionResult<'open_record'> = { series: 4, alerts: 0 };
    const dismissed: ActionResult<'dismiss_record'> = {};
    const exported: ActionResult<'export_tensorboard'> = {
      path: 'torchdbg-runs/nb-run1-20261205-170000',
      scalars: 40
    };
    const valid: [string, unknown][] = [
      ['empty_cache', empty],
      ['release_refs', released],
      ['record_memory', armed],
      ['save_checkpoint', saved],
      ['set_memory_guard', guard],
      ['measure_activations', measured],
      ['open_record', opened],
      ['dismiss_record', dismissed],
      ['export_tensorboard', exported]
    ];
    for (const [action, result] of valid) {
      expect([action, resultSchema(action)(result)]).toEqual([action, true]);
    }
    // @ts-expect-error the file saved is `file` (no `filename`)
    expect(saved.filename).toBeUndefined();
    // drift: a missing field, a wrong type, an extra field, a value ruled out
    expect(resultSchema('save_checkpoint')({ ...saved, file: undefined })).toBe(
      false
    );
    expect(resultSchema('empty_cache')({ devices: [], freed_bytes: '4' })).toBe(
      false
    );
    expect(resultSchema('dismiss_record')({ dismissed: true })).toBe(false);
    expect(
      resultSchema('record_memory')({ ...armed, state: 'on', since: null })
    ).toBe(false);
  });
});

describe('the action service', () => {
  it('holds an action as pending while the busy kernel cannot answer, until its reply', async () => {
    const { conn, kernel } = await connected();
    const seen: (readonly string[])[] = [];
    conn.actions.pendingChanged.connect((_, p) => seen.push([...p]));
    kernel.setStatus('busy');
    let told = 0;
    const p = conn.actions.send('pause', {}, () => told++);
    expect(told).toBe(1);
    expect(conn.actions.pending).toEqual(['pause']);
    kernel.comms[0].deliver({
      method: 'error',
      request_id: lastRequest(kernel).request_id,
      code: 'refused',
      message: 'pause: nothing is training'
    });
    await expect(p).resolves.toEqual({
      ok: false,
      action: 'pause',
      code: 'refused',
      error: 'pause: nothing is training'
    });
    expect(conn.actions.pending).toEqual([]);
    expect(seen).toEqual([['pause'], []]);
  });

  it('does not hold an action the idle kernel answers at once', async () => {
    const { conn, kernel } = await connected();
    const p = conn.actions.send('unclip', {});
    expect(conn.actions.pending).toEqual([]);
    kernel.comms[0].deliver({
      method: 'ack',
      request_id: lastRequest(kernel).request_id,
      action: 'unclip',
      result: { clip: null }
    });
    await expect(p).resolves.toEqual({
      ok: true,
      action: 'unclip',
      result: { clip: null }
    });
  });

  it('resolves (never rejects) with `unsent` when the kernel side is not connected', async () => {
    const kernel = new FakeKernel();
    const conn = new TorchDbgConnection({
      kernel: kernel.asKernel(),
      page: null
    });
    const outcome = await conn.actions.send('snapshot', {});
    expect(outcome).toMatchObject({ ok: false, code: 'unsent' });
    expect(outcome.ok ? '' : outcome.error).toMatch(/not connected/);
  });

  it('a busy kernel that restarts fails the pending action and clears it', async () => {
    const { conn, kernel } = await connected();
    kernel.setStatus('busy');
    const p = conn.actions.send('step', {});
    expect(conn.actions.pending).toEqual(['step']);
    kernel.setStatus('restarting');
    await expect(p).resolves.toMatchObject({ ok: false, code: 'failed' });
    expect(conn.actions.pending).toEqual([]);
  });

  it('the ranks note reads the typed ack', async () => {
    const { conn, kernel } = await connected();
    const p = sendRanksAction(conn, 'ranks_pause', {}, trans);
    expect(conn.model.ranks.note?.kind).toBe('sending');
    kernel.comms[0].deliver({
      method: 'ack',
      request_id: lastRequest(kernel).request_id,
      action: 'ranks_pause',
      result: { at_step: 12, ranks: [0, 1] }
    });
    await expect(p).resolves.toEqual({
      ok: true,
      text: 'pause at step 12 on ranks 0, 1'
    });
    expect(conn.model.ranks.note).toEqual({
      kind: 'ack',
      action: 'ranks_pause',
      text: 'pause at step 12 on ranks 0, 1'
    });
  });
});
