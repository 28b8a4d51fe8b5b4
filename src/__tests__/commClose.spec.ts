/**
 * R46: the panel closes its comm when the page goes away, when it follows
 * another kernel and when it is disposed; `open` carries the tab's client id,
 * kept across reloads and never shared by two live tabs.
 */
import { Signal } from '@lumino/signaling';

import { claimClientId, IClaimChannel } from '../connection/clientId';
import { TorchDbgConnection } from '../connection/connection';
import { ISessionWidget, KernelTracker } from '../connection/tracker';
import { PROTOCOL_VERSION } from '../protocol/version';
import { FakeKernel, flush, loadedKernel } from './fakeKernel';

async function connected(
  options: Partial<TorchDbgConnection.IOptions> = {}
): Promise<{ kernel: FakeKernel; conn: TorchDbgConnection }> {
  const kernel = new FakeKernel();
  loadedKernel(kernel);
  const conn = new TorchDbgConnection({
    kernel: kernel.asKernel(),
    ...options
  });
  await conn.connect();
  expect(conn.isConnected).toBe(true);
  return { kernel, conn };
}

/** A notebook panel whose session can change kernels. */
class FakeWidget {
  constructor(kernel: FakeKernel) {
    this.session = { kernel };
  }
  title = { label: 'nb.ipynb' };
  session: { kernel: FakeKernel | null };
  kernelChanged = new Signal<this, unknown>(this);
  get sessionContext() {
    return {
      kernelChanged: this.kernelChanged,
      session: this.session,
      ready: Promise.resolve()
    };
  }
  changeKernel(kernel: FakeKernel) {
    this.session = { kernel };
    this.kernelChanged.emit(null);
  }
  asWidget(): ISessionWidget {
    return this as unknown as ISessionWidget;
  }
}

function pythonKernel(id: string): FakeKernel {
  const kernel = new FakeKernel();
  kernel.id = id;
  loadedKernel(kernel);
  return kernel;
}

/** BroadcastChannels of one origin: a message reaches every other member. */
class FakeBus {
  channel(): IClaimChannel {
    const listeners = new Set<(ev: MessageEvent) => void>();
    const member = {
      listeners,
      postMessage: (message: unknown) => {
        for (const other of this._members) {
          if (other !== member) {
            setTimeout(() => {
              for (const l of [...other.listeners]) {
                l({ data: message } as MessageEvent);
              }
            }, 1);
          }
        }
      },
      addEventListener: (_: 'message', l: (ev: MessageEvent) => void) =>
        listeners.add(l),
      removeEventListener: (_: 'message', l: (ev: MessageEvent) => void) =>
        listeners.delete(l)
    };
    this._members.push(member);
    return member;
  }
  private _members: {
    listeners: Set<(ev: MessageEvent) => void>;
  }[] = [];
}

class FakeStorage {
  items = new Map<string, string>();
  getItem(key: string) {
    return this.items.get(key) ?? null;
  }
  setItem(key: string, value: string) {
    this.items.set(key, value);
  }
  copy(): FakeStorage {
    const c = new FakeStorage();
    c.items = new Map(this.items);
    return c;
  }
}

describe('R46: the connection closes its comm', () => {
  it('on dispose', async () => {
    const { kernel, conn } = await connected();
    conn.dispose();
    expect(kernel.comms[0].closed).toBe(true);
  });

  it('on pagehide, answering pending actions; reattaches on a bfcache pageshow', async () => {
    const page = new EventTarget();
    const { kernel, conn } = await connected({ page });
    const pending = conn.sendAction('snapshot', {});
    page.dispatchEvent(new Event('pagehide'));
    expect(kernel.comms[0].closed).toBe(true);
    expect(await pending).toMatchObject({
      method: 'error',
      message: 'The page was closed.'
    });
    expect(conn.isConnected).toBe(false);
    // restored from the back/forward cache: a new comm, connected again
    page.dispatchEvent(
      Object.assign(new Event('pageshow'), { persisted: true })
    );
    await flush();
    expect(kernel.comms).toHaveLength(2);
    expect(kernel.comms[1].closed).toBe(false);
    expect(conn.isConnected).toBe(true);
  });

  it('stops listening to the page once disposed', async () => {
    const page = new EventTarget();
    const { kernel, conn } = await connected({ page });
    conn.dispose();
    page.dispatchEvent(
      Object.assign(new Event('pageshow'), { persisted: true })
    );
    await flush();
    expect(kernel.comms).toHaveLength(1);
  });

  it('sends the tab client id in open', async () => {
    const { kernel } = await connected({
      clientId: () => Promise.resolve('tab-1')
    });
    expect(kernel.comms[0].opened).toEqual({
      method: 'open',
      protocol_version: PROTOCOL_VERSION,
      client: 'jupyterlab',
      client_id: 'tab-1'
    });
  });

  it('when the tracker follows another notebook or kernel', async () => {
    const k1 = pythonKernel('k1');
    const k2 = pythonKernel('k2');
    const tracker = new KernelTracker({});
    const nb1 = new FakeWidget(k1);
    const nb2 = new FakeWidget(k2);
    tracker.setWidget(nb1.asWidget());
    await flush();
    const first = tracker.current!;
    expect(first.isConnected).toBe(true);

    // another notebook on another kernel: the first kernel's comm is closed
    tracker.setWidget(nb2.asWidget());
    await flush();
    expect(k1.comms[0].closed).toBe(true);
    expect(first.isDisposed).toBe(true);
    expect(tracker.connections).toEqual([tracker.current]);
    expect(tracker.current?.isConnected).toBe(true);

    // the notebook changes kernel: the old kernel's comm is closed too
    const k3 = pythonKernel('k3');
    nb2.changeKernel(k3);
    await flush();
    expect(k2.comms[0].closed).toBe(true);
    expect(tracker.current?.kernel.id).toBe('k3');
    expect(tracker.connections).toHaveLength(1);

    // back to the first notebook: a new comm (one snapshot), the k3 one closed
    tracker.setWidget(nb1.asWidget());
    await flush();
    expect(k1.comms).toHaveLength(2);
    expect(k1.comms[1].closed).toBe(false);
    expect(k3.comms[0].closed).toBe(true);
    expect(tracker.current?.isConnected).toBe(true);

    tracker.dispose();
    expect(k1.comms[1].closed).toBe(true);
  });

  it('not while a console opened on the same kernel is still starting', async () => {
    // The Debug action opens a console on the notebook's kernel: for a moment its
    // session has no kernel. The notebook's connection must survive that moment, or
    // the panel would reconnect through the console's comm-less kernel connection.
    const k1 = pythonKernel('k1');
    const tracker = new KernelTracker({});
    tracker.setWidget(new FakeWidget(k1).asWidget());
    await flush();
    const first = tracker.current!;
    const console = new FakeWidget(k1);
    console.session = { kernel: null };
    tracker.setWidget(console.asWidget());
    await flush();
    expect(first.isDisposed).toBe(false);
    expect(k1.comms[0].closed).toBe(false);
    console.changeKernel(k1);
    await flush();
    expect(tracker.current).toBe(first);
    expect(k1.comms).toHaveLength(1);
    tracker.dispose();
  });

  it('not when two notebooks share one kernel', async () => {
    const k1 = pythonKernel('k1');
    const tracker = new KernelTracker({});
    tracker.setWidget(new FakeWidget(k1).asWidget());
    await flush();
    tracker.setWidget(new FakeWidget(k1).asWidget());
    await flush();
    expect(k1.comms).toHaveLength(1);
    expect(k1.comms[0].closed).toBe(false);
    tracker.dispose();
  });
});

describe('R46: the tab client id', () => {
  it('is kept across reloads of a tab and new for a new tab', async () => {
    const bus = new FakeBus();
    const storage = new FakeStorage();
    let n = 0;
    const newId = () => `id-${++n}`;
    const first = await claimClientId({
      storage,
      channel: bus.channel(),
      newId,
      waitMs: 20
    });
    expect(first).toBe('id-1');
    // reload: the old page is gone (its channel no longer answers)
    const reloaded = await claimClientId({
      storage,
      channel: new FakeBus().channel(),
      newId,
      waitMs: 20
    });
    expect(reloaded).toBe('id-1');
    const otherTab = await claimClientId({
      storage: new FakeStorage(),
      channel: bus.channel(),
      newId,
      waitMs: 20
    });
    expect(otherTab).toBe('id-2');
  });

  it('is not shared with a duplicated tab while the original lives (R05)', async () => {
    const bus = new FakeBus();
    const storage = new FakeStorage();
    let n = 0;
    const newId = () => `id-${++n}`;
    const original = await claimClientId({
      storage,
      channel: bus.channel(),
      newId,
      waitMs: 20
    });
    // a duplicated tab starts with a copy of the original's sessionStorage
    const copy = storage.copy();
    const duplicate = await claimClientId({
      storage: copy,
      channel: bus.channel(),
      newId,
      waitMs: 20
    });
    expect(original).toBe('id-1');
    expect(duplicate).toBe('id-2');
    expect(copy.getItem('jupyterlab_torchdbg:client-id')).toBe('id-2');
  });

  it('replaces a stored value the schema would refuse; none without storage', async () => {
    const storage = new FakeStorage();
    storage.setItem('jupyterlab_torchdbg:client-id', '<img src=x>');
    const id = await claimClientId({ storage, channel: null });
    expect(id).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    expect(await claimClientId({ storage: null, channel: null })).toBeNull();
  });
});
