import { TorchDbgConnection, LOAD_CODE } from '../connection/connection';
import { PROTOCOL_VERSION } from '../protocol/version';
import {
  encodeBlock,
  FakeComm,
  FakeKernel,
  flush,
  hello,
  loadedKernel
} from './fakeKernel';

describe('TorchDbgConnection', () => {
  it('opens the comm with the protocol version and becomes connected', async () => {
    const kernel = new FakeKernel();
    loadedKernel(kernel);
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    expect(kernel.comms[0].targetName).toBe('jupyterlab_torchdbg');
    expect(kernel.comms[0].opened).toEqual({
      method: 'open',
      protocol_version: PROTOCOL_VERSION,
      client: 'jupyterlab'
    });
    expect(conn.model.state.kind).toBe('connected');
    expect(conn.model.hello?.capabilities.subshells).toBe(true);
    expect(kernel.executed).toEqual([]); // no code run when already loaded
  });

  it('autoloads silently when the target is missing, then reconnects', async () => {
    const kernel = new FakeKernel();
    let loaded = false;
    kernel.onOpen = comm => {
      if (!loaded) {
        comm.closeFromKernel(); // ipykernel: no such comm target
        loaded = true;
      } else {
        comm.deliver(hello());
      }
    };
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    expect(kernel.executed).toEqual([{ code: LOAD_CODE, silent: true }]);
    expect(conn.model.state.kind).toBe('connected');
  });

  it('says "not loaded" and runs nothing when autoLoad is off', async () => {
    const kernel = new FakeKernel();
    kernel.onOpen = comm => comm.closeFromKernel();
    const conn = new TorchDbgConnection({
      kernel: kernel.asKernel(),
      autoLoad: false
    });
    await conn.connect();
    expect(kernel.executed).toEqual([]);
    expect(conn.model.state).toEqual({
      kind: 'not_loaded',
      reason: 'Automatic loading is off.'
    });
  });

  it('reports a missing package with the import error', async () => {
    const kernel = new FakeKernel();
    kernel.onOpen = comm => comm.closeFromKernel();
    kernel.loadBehaviour = {
      status: 'error',
      ename: 'ModuleNotFoundError',
      evalue: "No module named 'jupyterlab_torchdbg'"
    };
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    expect(conn.model.state.kind).toBe('package_missing');
  });

  it('refuses a non-Python kernel without running code', async () => {
    const kernel = new FakeKernel();
    kernel.language = 'R';
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    expect(conn.model.state).toEqual({ kind: 'not_python', language: 'R' });
    expect(kernel.comms).toHaveLength(0);
  });

  it('R07: refuses a different major version, naming both', async () => {
    const kernel = new FakeKernel();
    loadedKernel(kernel, {
      protocol_version: '1.0',
      package_version: '9.9.9',
      accepted: true
    });
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    const state = conn.model.state;
    expect(state.kind).toBe('version_mismatch');
    if (state.kind === 'version_mismatch') {
      expect(state.message).toContain('1.0');
      expect(state.message).toContain(PROTOCOL_VERSION);
      expect(state.message).toContain('9.9.9');
    }
    expect(kernel.comms[0].closed).toBe(true);
  });

  it('R04: reattaches after a kernel restart and resets the data', async () => {
    const kernel = new FakeKernel();
    loadedKernel(kernel);
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    const { x, y } = encodeBlock([0, 1], [[1, 2]]);
    kernel.comms[0].deliver(
      {
        method: 'series',
        seq: 1,
        blocks: [{ id: 1, names: ['loss'], count: 2 }]
      },
      [x, y]
    );
    expect(conn.model.series.get('loss')?.length).toBe(2);
    kernel.setStatus('restarting');
    expect(conn.model.state.kind).toBe('restarting');
    expect(conn.model.series.size).toBe(0);
    // the restarted kernel has no extension loaded until autoload runs
    let opens = 0;
    kernel.onOpen = comm => {
      opens++;
      if (opens === 1) {
        comm.closeFromKernel();
      } else {
        comm.deliver(hello({ session_id: 's2' }));
      }
    };
    kernel.setStatus('starting');
    kernel.setStatus('idle');
    await flush();
    await flush();
    expect(conn.model.state.kind).toBe('connected');
    expect(kernel.executed.map(e => e.code)).toEqual([LOAD_CODE]);
  });

  it('a kernel that died keeps what it showed until the next kernel connects (#24)', async () => {
    const kernel = new FakeKernel();
    loadedKernel(kernel);
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    const { x, y } = encodeBlock([0, 1], [[1, 2]]);
    kernel.comms[0].deliver(
      {
        method: 'series',
        seq: 1,
        blocks: [{ id: 1, names: ['loss'], count: 2 }]
      },
      [x, y]
    );
    // the server restarts a kernel that died: "autorestarting"
    kernel.setStatus('autorestarting');
    expect(conn.model.state.kind).toBe('restarting');
    expect(conn.model.died).not.toBeNull();
    expect(conn.model.series.get('loss')?.length).toBe(2);
    // read only meanwhile: actions are refused with the reason
    await expect(conn.sendAction('snapshot', {})).rejects.toThrow(
      'not connected (restarting)'
    );
    kernel.onOpen = comm => comm.deliver(hello({ session_id: 's2' }));
    kernel.setStatus('starting');
    kernel.setStatus('idle');
    await flush();
    await flush();
    // the new kernel: a fresh panel (its record tells about the one that died)
    expect(conn.model.state.kind).toBe('connected');
    expect(conn.model.died).toBeNull();
    expect(conn.model.series.size).toBe(0);
  });

  it('R04: actions never throw "Cannot send"; they reject with the reason', async () => {
    const kernel = new FakeKernel();
    kernel.onOpen = comm => comm.closeFromKernel();
    const conn = new TorchDbgConnection({
      kernel: kernel.asKernel(),
      autoLoad: false
    });
    await conn.connect();
    await expect(conn.sendAction('snapshot', {})).rejects.toThrow(
      'not connected (not_loaded)'
    );
  });

  it('R13: resolves each action with its own reply by request id', async () => {
    const kernel = new FakeKernel();
    loadedKernel(kernel);
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    const comm = kernel.comms[0];
    const p1 = conn.sendAction('clear_history', { names: ['a'] });
    const p2 = conn.sendAction('snapshot', {});
    const [m1, m2] = comm.sent as { request_id: string; action: string }[];
    expect(m1.request_id).not.toEqual(m2.request_id);
    comm.deliver({
      method: 'ack',
      request_id: m2.request_id,
      action: 'snapshot',
      result: {}
    });
    comm.deliver({
      method: 'error',
      request_id: m1.request_id,
      code: 'invalid_args',
      message: 'bad'
    });
    await expect(p1).resolves.toMatchObject({
      method: 'error',
      code: 'invalid_args'
    });
    await expect(p2).resolves.toMatchObject({
      method: 'ack',
      action: 'snapshot'
    });
  });

  it('pending actions resolve with an error when the kernel side closes', async () => {
    const kernel = new FakeKernel();
    loadedKernel(kernel);
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    const p = conn.sendAction('snapshot', {});
    kernel.comms[0].closeFromKernel();
    await expect(p).resolves.toMatchObject({ method: 'error', code: 'failed' });
    expect(conn.model.state.kind).toBe('not_loaded');
  });

  it('asks for a snapshot when a sequence gap shows a lost message', async () => {
    const kernel = new FakeKernel();
    loadedKernel(kernel);
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    const comm = kernel.comms[0];
    const b = encodeBlock([0], [[1]]);
    comm.deliver(
      { method: 'series', seq: 1, blocks: [{ id: 1, names: ['a'], count: 1 }] },
      [b.x, b.y]
    );
    const c = encodeBlock([5], [[1]]);
    comm.deliver({ method: 'series', seq: 3, blocks: [{ id: 1, count: 1 }] }, [
      c.x,
      c.y
    ]);
    expect(conn.model.gaps).toBe(1);
    expect(comm.sent).toEqual([
      expect.objectContaining({ method: 'action', action: 'snapshot' })
    ]);
  });
  it('R05/R06: a second client decodes id-only blocks through its snapshot', async () => {
    const kernel = new FakeKernel();
    loadedKernel(kernel);
    const first = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await first.connect();
    const a = kernel.comms[0];
    // the kernel announces block 1's names once, then sends its id only
    const p1 = encodeBlock([0, 1], [[1, 2]]);
    a.deliver(
      {
        method: 'series',
        seq: 1,
        blocks: [{ id: 1, names: ['loss'], count: 2 }]
      },
      [p1.x, p1.y]
    );
    const p2 = encodeBlock([2], [[3]]);
    a.deliver({ method: 'series', seq: 2, blocks: [{ id: 1, count: 1 }] }, [
      p2.x,
      p2.y
    ]);
    // a second panel opens late: its snapshot carries the whole name table
    kernel.onOpen = (comm: FakeComm) => {
      comm.deliver(hello());
      const h = encodeBlock([0, 1, 2], [[1, 2, 3]]);
      comm.deliver(
        {
          method: 'snapshot',
          seq: 2,
          blocks: [{ id: 1, names: ['loss'], count: 3 }],
          stats: { messages: 2, points: 3, errors: {} }
        },
        [h.x, h.y]
      );
    };
    const second = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await second.connect();
    const b = kernel.comms[1];
    // the next broadcast names no names; both panels decode it
    const p3 = encodeBlock([3], [[4]]);
    for (const comm of [a, b]) {
      comm.deliver(
        { method: 'series', seq: 3, blocks: [{ id: 1, count: 1 }] },
        [p3.x, p3.y]
      );
    }
    for (const conn of [first, second]) {
      const ring = conn.model.series.get('loss')!;
      expect(Array.from(ring.toArrays().y)).toEqual([1, 2, 3, 4]);
      expect(conn.model.unknownBlocks).toBe(0);
      expect(conn.model.gaps).toBe(0);
    }
    expect(a.sent).toEqual([]);
    expect(b.sent).toEqual([]);
  });

  it('asks once for a snapshot when a block id has no known names', async () => {
    const kernel = new FakeKernel();
    loadedKernel(kernel);
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    const comm = kernel.comms[0];
    const p = encodeBlock([0], [[1]]);
    // the message that announced block 4 was lost
    comm.deliver({ method: 'series', seq: 1, blocks: [{ id: 4, count: 1 }] }, [
      p.x,
      p.y
    ]);
    comm.deliver({ method: 'series', seq: 2, blocks: [{ id: 4, count: 1 }] }, [
      p.x,
      p.y
    ]);
    expect(conn.model.unknownBlocks).toBe(2);
    expect(conn.model.series.size).toBe(0);
    expect(comm.sent).toEqual([
      expect.objectContaining({ method: 'action', action: 'snapshot' })
    ]);
    // the snapshot restores the table: the next id-only block decodes
    const h = encodeBlock([0, 1], [[1, 1]]);
    comm.deliver(
      {
        method: 'snapshot',
        seq: 2,
        blocks: [{ id: 4, names: ['lr'], count: 2 }],
        stats: { messages: 2, points: 2, errors: {} }
      },
      [h.x, h.y]
    );
    const q = encodeBlock([2], [[0.5]]);
    comm.deliver({ method: 'series', seq: 3, blocks: [{ id: 4, count: 1 }] }, [
      q.x,
      q.y
    ]);
    expect(Array.from(conn.model.series.get('lr')!.toArrays().y)).toEqual([
      1, 1, 0.5
    ]);
    expect(comm.sent).toHaveLength(1);
  });
});
