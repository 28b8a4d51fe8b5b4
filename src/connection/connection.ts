import type { Kernel } from '@jupyterlab/services';
import { PromiseDelegate } from '@lumino/coreutils';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { ActionName, IActionArgs, IHello } from '../protocol/messages';
import { COMM_TARGET } from '../protocol/version';
import { TorchDbgModel } from '../model/model';
import { ActionService } from './actions';
import { closeQuietly, helloRefusal, openMessage } from './handshake';
import { showKernelGone } from './kernelGone';
import { kernelLanguage, loadKernelSide } from './loader';
import { PendingRequests } from './requests';
import { Resync } from './resync';
import { routeMessage } from './router';
import {
  ActionReply,
  IConnectionOptions,
  IKernelLike,
  IPageEvents as IPageEventsT,
  KernelMessageEvent
} from './types';
import { tabClientId } from './clientId';

export { LOAD_CODE } from './loader';
export type { ActionReply, IKernelLike, KernelMessageEvent } from './types';

/** How long to wait for `hello` before saying the kernel is busy. */
const HELLO_PATIENCE_MS = 3000;

/**
 * One kernel's side of the wire: opens the comm, checks the handshake, loads
 * the kernel extension when allowed (`./loader`), reattaches after restarts and
 * reconnects (R04), and sends actions with one reply each (R13, `./requests`).
 * Incoming messages are dispatched to the model by `./router`.
 *
 * The comm is closed on dispose and when the page goes away (`pagehide`), and
 * the `open` carries this tab's client id, so the kernel drops a comm that a
 * reloaded or crashed page left behind (R46).
 */
export class TorchDbgConnection implements IDisposable {
  constructor(options: IConnectionOptions) {
    this.kernel = options.kernel;
    this.model = options.model ?? new TorchDbgModel();
    this._autoLoad = options.autoLoad ?? true;
    this._findClientId = options.clientId ?? tabClientId;
    this._page =
      options.page !== undefined
        ? options.page
        : typeof window === 'undefined'
          ? null
          : window;
    this._page?.addEventListener('pagehide', this._onPageHide);
    this._page?.addEventListener('pageshow', this._onPageShow);
    this.kernel.statusChanged.connect(this._onStatus, this);
    this.kernel.connectionStatusChanged.connect(this._onConnectionStatus, this);
    this.kernel.disposed.connect(this.dispose, this);
  }

  readonly kernel: IKernelLike;
  readonly model: TorchDbgModel;
  /** Every panel's and command's way to send an action (`./actions`). */
  get actions(): ActionService {
    return ActionService.of(this);
  }

  /** Whether the kernel's side answered `hello` and accepted our version. */
  get isConnected(): boolean {
    return this.model.state.kind === 'connected' && this._comm !== null;
  }

  /** Kernel messages other than the stream (acks, errors, hello). */
  get message(): ISignal<this, KernelMessageEvent> {
    return this._message;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  set autoLoad(value: boolean) {
    this._autoLoad = value;
  }

  /**
   * Attach to the kernel: open the comm; if the target is missing and
   * autoLoad is on, run `%load_ext` silently and retry once.
   */
  async connect(): Promise<void> {
    if (this._disposed || this._connecting) {
      return;
    }
    this._connecting = true;
    try {
      this._closeComm();
      this.model.state = { kind: 'connecting' };
      const clientId = this._findClientId().catch(() => null);
      const language = await kernelLanguage(this.kernel);
      this._clientId = await clientId;
      if (this._disposed) {
        return;
      }
      if (language !== null && language !== 'python') {
        this.model.state = { kind: 'not_python', language };
        return;
      }
      let outcome = await this._open();
      if (outcome === 'no_target' && this._autoLoad) {
        this.model.state = { kind: 'loading' };
        const loaded = await this.load();
        if (!loaded) {
          return;
        }
        outcome = await this._open();
      }
      if (outcome === 'no_target') {
        this.model.state = {
          kind: 'not_loaded',
          reason: this._autoLoad
            ? 'The kernel side did not start.'
            : 'Automatic loading is off.'
        };
      }
    } finally {
      this._connecting = false;
    }
  }

  /**
   * The kernel side says it (re)loaded (`%load_ext` typed by hand after an
   * `%unload_ext`, a `%reload_ext`, another tab's auto-load): open the comm
   * again unless connected or connecting. Never loads anything itself.
   */
  reattach(): void {
    if (this._disposed || this._connecting || this._hidden) {
      return;
    }
    if (this.isConnected) {
      return;
    }
    void this.connect();
  }

  /**
   * Run `%load_ext jupyterlab_torchdbg` silently. Returns false (and sets the
   * state) when the package is missing or the load failed.
   */
  async load(): Promise<boolean> {
    const failure = await loadKernelSide(this.kernel);
    if (failure) {
      this.model.state = failure;
      return false;
    }
    return true;
  }

  /**
   * Send an allowlisted action. Resolves with the kernel's ack or error;
   * rejects (never throws synchronously) when the kernel side is not connected.
   * `onPending` is called when the kernel is busy and cannot handle comm
   * messages until the running cell ends (no subshells).
   */
  sendAction<K extends ActionName>(
    action: K,
    args: IActionArgs[K],
    onPending?: () => void
  ): Promise<ActionReply<K>> {
    const comm = this._comm;
    if (!comm || this.model.state.kind !== 'connected') {
      return Promise.reject(
        new Error(
          `The kernel side is not connected (${this.model.state.kind}).`
        )
      );
    }
    let reply: Promise<ActionReply<K>>;
    try {
      reply = this._pending.send(comm, action, args);
    } catch (e) {
      return Promise.reject(e);
    }
    if (onPending && !this.model.hello?.capabilities.subshells) {
      if (this.kernel.status === 'busy') {
        onPending();
      }
    }
    return reply;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._page?.removeEventListener('pagehide', this._onPageHide);
    this._page?.removeEventListener('pageshow', this._onPageShow);
    this._closeComm();
    this._pending.failAll('The panel was closed.');
    Signal.clearData(this);
  }

  // --- private -----------------------------------------------------------------

  /**
   * Open a comm and wait for `hello`. Resolves 'hello' once connected or
   * refused, 'no_target' when the kernel closed the comm at once (no target).
   */
  private _open(): Promise<'hello' | 'no_target' | 'closed'> {
    const result = new PromiseDelegate<'hello' | 'no_target' | 'closed'>();
    let comm: Kernel.IComm;
    try {
      comm = this.kernel.createComm(COMM_TARGET);
    } catch (e) {
      this.model.state = {
        kind: 'not_loaded',
        reason: `Cannot open a comm: ${(e as Error).message}`
      };
      return Promise.resolve('closed');
    }
    let greeted = false;
    const patience = setTimeout(() => {
      if (!greeted && !this._disposed) {
        this.model.state = { kind: 'busy_waiting' };
      }
    }, HELLO_PATIENCE_MS);
    comm.onMsg = msg => {
      const data = msg.content.data as unknown as KernelMessageEvent['data'];
      const buffers = (msg.buffers ?? []) as (ArrayBuffer | ArrayBufferView)[];
      if (data && data.method === 'hello') {
        greeted = true;
        clearTimeout(patience);
        this._onHello(comm, data);
        result.resolve('hello');
        return;
      }
      this._onKernelMessage(data, buffers);
    };
    comm.onClose = () => {
      clearTimeout(patience);
      if (this._comm === comm) {
        this._comm = null;
        this._pending.failAll('The kernel side closed the connection.');
        if (this.model.state.kind === 'connected') {
          this.model.state = {
            kind: 'not_loaded',
            reason: 'The kernel side was unloaded (%unload_ext).'
          };
        }
      }
      result.resolve(greeted ? 'closed' : 'no_target');
    };
    this._comm = comm;
    const open = openMessage(this._clientId);
    try {
      comm.open(open as unknown as Record<string, never>);
    } catch (e) {
      clearTimeout(patience);
      this._comm = null;
      this.model.state = {
        kind: 'not_loaded',
        reason: `Cannot open a comm: ${(e as Error).message}`
      };
      return Promise.resolve('closed');
    }
    return result.promise;
  }

  private _onHello(comm: Kernel.IComm, hello: IHello): void {
    this.model.hello = hello;
    const refusal = helloRefusal(hello);
    if (refusal) {
      this.model.state = refusal;
      if (this._comm === comm) {
        this._comm = null;
      }
      closeQuietly(comm);
      return;
    }
    if (hello.session_id !== this._sessionId) {
      this.model.reset();
      this._sessionId = hello.session_id;
    }
    this.model.state = { kind: 'connected' };
  }

  private _onKernelMessage(
    data: KernelMessageEvent['data'],
    buffers: (ArrayBuffer | ArrayBufferView)[]
  ): void {
    if (!data || typeof data !== 'object') {
      return;
    }
    try {
      if (data.method === 'snapshot') {
        this._resync.clear();
      }
      const outcome = routeMessage(this.model, data, buffers, this._sessionId);
      switch (outcome.kind) {
        case 'resync':
          this._resync.request();
          return;
        case 'stream':
          return;
        case 'reply':
          this._pending.resolve(outcome.reply);
          break;
        case 'message':
          if (outcome.resync) {
            this._resync.request();
          }
          break;
      }
      this._message.emit({ data, buffers });
    } catch (e) {
      console.warn('jupyterlab_torchdbg: bad message from kernel', e);
    }
  }

  private _onStatus(_: unknown, status: Kernel.Status): void {
    if (status === 'restarting' || status === 'autorestarting') {
      this._restarting = true;
      this._closeComm();
      this._pending.failAll('The kernel restarted.');
      showKernelGone(this.model, status);
    } else if (status === 'dead') {
      this._closeComm();
      this._pending.failAll('The kernel died.');
      showKernelGone(this.model, status);
    } else if (status === 'idle' && this._restarting) {
      this._restarting = false;
      void this.connect();
    }
  }

  private _onConnectionStatus(
    _: unknown,
    status: Kernel.ConnectionStatus
  ): void {
    if (status === 'connected' && this._wasDisconnected) {
      this._wasDisconnected = false;
      // The websocket came back: resync (the kernel side may have restarted).
      if (this._comm && this.model.state.kind === 'connected') {
        void this.sendAction('snapshot', {}).catch(() => this.connect());
      } else {
        void this.connect();
      }
    } else if (status !== 'connected') {
      this._wasDisconnected = true;
    }
  }

  /**
   * The page is going away (reload, close, navigation): close the comm while
   * the websocket is still up, best effort (R46). Not on `beforeunload`: the
   * user may cancel that ("unsaved changes") and keep using the panel.
   */
  private _onPageHide = (): void => {
    this._hidden = true;
    this._closeComm();
    this._pending.failAll('The page was closed.');
  };

  /** Back from the back/forward cache after `pagehide`: reattach. */
  private _onPageShow = (ev: Event): void => {
    if (this._hidden && (ev as PageTransitionEvent).persisted) {
      this._hidden = false;
      void this.connect();
    }
  };

  private _closeComm(): void {
    const comm = this._comm;
    this._comm = null;
    this._resync.clear();
    if (comm) {
      closeQuietly(comm);
    }
  }

  private _comm: Kernel.IComm | null = null;
  private _clientId: string | null = null;
  private _findClientId: () => Promise<string | null>;
  private _page: IPageEventsT | null;
  private _hidden = false;
  private _autoLoad: boolean;
  private _connecting = false;
  private _disposed = false;
  private _restarting = false;
  private _wasDisconnected = false;
  private _resync = new Resync(() => this.sendAction('snapshot', {}));
  private _sessionId: string | null = null;
  private _pending = new PendingRequests();
  private _message = new Signal<this, KernelMessageEvent>(this);
}

export namespace TorchDbgConnection {
  export type IOptions = IConnectionOptions;
  /** The part of `window` the connection listens on. */
  export type IPageEvents = IPageEventsT;
}
