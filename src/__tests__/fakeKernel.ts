/**
 * A fake kernel connection for jest: comms record what the panel sends, and the
 * test plays the kernel by calling `deliver` / `closeFromKernel`.
 */
import { Signal } from '@lumino/signaling';

import type { IKernelLike } from '../connection/connection';
import { PROTOCOL_VERSION } from '../protocol/version';

export class FakeComm {
  constructor(
    readonly targetName: string,
    readonly commId: string
  ) {}
  sent: unknown[] = [];
  opened: unknown = null;
  isDisposed = false;
  closed = false;
  onMsg: ((msg: unknown) => void) | null = null;
  onClose: ((msg: unknown) => void) | null = null;
  open(data: unknown) {
    this.opened = data;
    return { done: Promise.resolve() };
  }
  send(data: unknown) {
    if (this.closed) {
      throw new Error('Cannot send on a closed comm');
    }
    this.sent.push(data);
    return { done: Promise.resolve() };
  }
  close() {
    this.closed = true;
    return { done: Promise.resolve() };
  }
  deliver(data: unknown, buffers: ArrayBuffer[] = []) {
    this.onMsg?.({ content: { comm_id: this.commId, data }, buffers });
  }
  closeFromKernel() {
    this.closed = true;
    this.onClose?.({ content: { comm_id: this.commId, data: {} } });
  }
}

export interface IExecuteBehaviour {
  status: 'ok' | 'error';
  ename?: string;
  evalue?: string;
}

export class FakeKernel {
  id = 'k1';
  status = 'idle';
  connectionStatus = 'connected';
  isDisposed = false;
  language = 'python';
  comms: FakeComm[] = [];
  executed: { code: string; silent: boolean }[] = [];
  /** What the next %load_ext does. */
  loadBehaviour: IExecuteBehaviour = { status: 'ok' };
  /** Called with each new comm after open (play the kernel here). */
  onOpen: ((comm: FakeComm) => void) | null = null;
  statusChanged = new Signal<FakeKernel, string>(this);
  connectionStatusChanged = new Signal<FakeKernel, string>(this);
  disposed = new Signal<FakeKernel, void>(this);
  iopubMessage = new Signal<FakeKernel, unknown>(this);
  /** Comm targets the panel registered (kernel-initiated comms). */
  targets = new Map<string, (comm: unknown, msg: unknown) => void>();

  registerCommTarget(
    name: string,
    callback: (comm: unknown, msg: unknown) => void
  ) {
    this.targets.set(name, callback);
  }

  /** Play one execute request's iopub messages: input, maybe an error, idle. */
  runCell(msgId: string, options: { error?: boolean; date?: string } = {}) {
    const parent = { msg_id: msgId, msg_type: 'execute_request' };
    const date = options.date ?? new Date().toISOString();
    const send = (msg_type: string, content: unknown) =>
      this.iopubMessage.emit({
        header: { msg_type, date },
        parent_header: parent,
        content
      });
    send('execute_input', { code: 'x', execution_count: 1 });
    if (options.error) {
      send('error', { ename: 'E', evalue: '', traceback: [] });
    }
    send('status', { execution_state: 'idle' });
  }

  get info() {
    return Promise.resolve({ language_info: { name: this.language } });
  }

  createComm(target: string) {
    const comm = new FakeComm(target, `c${this.comms.length + 1}`);
    const open = comm.open.bind(comm);
    comm.open = (data: unknown) => {
      const r = open(data);
      setTimeout(() => this.onOpen?.(comm), 0);
      return r;
    };
    this.comms.push(comm);
    return comm;
  }

  requestExecute(content: { code: string; silent: boolean }) {
    this.executed.push({ code: content.code, silent: content.silent });
    const b = this.loadBehaviour;
    return {
      done: Promise.resolve({
        content:
          b.status === 'ok'
            ? { status: 'ok' }
            : {
                status: 'error',
                ename: b.ename,
                evalue: b.evalue,
                traceback: []
              }
      })
    };
  }

  setStatus(s: string) {
    this.status = s;
    this.statusChanged.emit(s);
  }

  asKernel(): IKernelLike {
    return this as unknown as IKernelLike;
  }
}

export function hello(overrides: Record<string, unknown> = {}) {
  return {
    method: 'hello',
    protocol_version: PROTOCOL_VERSION,
    package_version: '0.1.0',
    session_id: 's1',
    accepted: true,
    actions: ['clear_history', 'snapshot'],
    capabilities: {
      torch: { available: true, version: '2.13.0', reason: null },
      cuda: {
        available: false,
        initialized: false,
        device_count: 0,
        version: null,
        reason: 'no CUDA'
      },
      nvml: { available: false, version: null, reason: 'NVML unavailable' },
      subshells: true
    },
    ...overrides
  };
}

/**
 * Encode a block the way the kernel does: x float64, y float32 row-major (for
 * each x one value per name), little-endian. `ys` holds one array per name.
 */
export function encodeBlock(
  xs: number[],
  ys: number[][]
): { x: ArrayBuffer; y: ArrayBuffer } {
  const x = new Float64Array(xs);
  const k = ys.length;
  const y = new Float32Array(xs.length * k);
  ys.forEach((values, j) => values.forEach((v, i) => (y[i * k + j] = v)));
  return { x: x.buffer, y: y.buffer };
}

export const flush = () => new Promise(resolve => setTimeout(resolve, 5));

/** Play a kernel that has the extension loaded: hello + empty snapshot on open. */
export function loadedKernel(
  kernel: FakeKernel,
  helloOverrides: Record<string, unknown> = {}
): void {
  kernel.onOpen = (comm: FakeComm) => {
    comm.deliver(hello(helloOverrides));
    comm.deliver({
      method: 'snapshot',
      seq: 0,
      blocks: [],
      stats: { messages: 0, points: 0, errors: {} }
    });
  };
}
