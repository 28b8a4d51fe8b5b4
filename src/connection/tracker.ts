import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { CellOutcomes } from './cellOutcomes';
import { TorchDbgConnection } from './connection';

/** A widget with a session context (notebook panel, console panel). */
export interface ISessionWidget {
  readonly sessionContext: ISessionContext;
  readonly title: { label: string };
}

/**
 * Follows the active notebook or console and keeps one connection: the one to
 * the active document's kernel (`current`, or null). `currentChanged` fires
 * when the user switches documents or kernels. Once another kernel is shown,
 * the previous kernel's connection is disposed, closing its comm (R46: a kernel
 * the panel does not show sends it nothing; coming back reattaches with one
 * snapshot, R06).
 */
export class KernelTracker implements IDisposable {
  constructor(options: KernelTracker.IOptions) {
    this._autoLoad = options.autoLoad ?? true;
    this._outcomes.finished.connect((_, { kernelId, time }) => {
      this._connections.get(kernelId)?.model.exception.cellFinishedOk(time);
    });
  }

  get current(): TorchDbgConnection | null {
    return this._current;
  }

  /** The label of the document whose kernel is current. */
  get currentLabel(): string {
    return this._widget?.title.label ?? '';
  }

  get currentWidget(): ISessionWidget | null {
    return this._widget;
  }

  get currentChanged(): ISignal<this, TorchDbgConnection | null> {
    return this._currentChanged;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  get autoLoad(): boolean {
    return this._autoLoad;
  }

  set autoLoad(value: boolean) {
    this._autoLoad = value;
    for (const c of this._connections.values()) {
      c.autoLoad = value;
    }
  }

  /** All live connections (the shown one; the last shown while none is). */
  get connections(): TorchDbgConnection[] {
    return [...this._connections.values()];
  }

  /**
   * The kernel side of `kernelId` announced that it loaded (`announce.ts`):
   * the connection to it, if the panel follows it, opens its comm again.
   */
  kernelLoaded(kernelId: string): void {
    const conn = this._connections.get(kernelId);
    if (conn && !conn.isDisposed) {
      conn.reattach();
    }
  }

  /** Point the tracker at a notebook/console widget (or none). */
  setWidget(widget: ISessionWidget | null): void {
    if (widget === this._widget) {
      return;
    }
    if (this._widget) {
      this._widget.sessionContext.kernelChanged.disconnect(this._refresh, this);
    }
    this._widget = widget;
    if (widget) {
      widget.sessionContext.kernelChanged.connect(this._refresh, this);
      void widget.sessionContext.ready.then(() => this._refresh());
    }
    this._refresh();
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    for (const c of this._connections.values()) {
      c.dispose();
    }
    this._connections.clear();
    Signal.clearData(this);
  }

  private _refresh(): void {
    const kernel = this._widget?.sessionContext.session?.kernel ?? null;
    const next = kernel ? this._connectionFor(kernel) : null;
    if (next !== this._current) {
      this._current = next;
      this._currentChanged.emit(next);
    }
    if (next) {
      // Only once another kernel is shown: a widget whose session is still starting
      // (a console just opened on this kernel has no kernel for a moment) must not
      // close the connection it is about to share.
      for (const conn of [...this._connections.values()]) {
        if (conn !== next) {
          this._drop(conn);
        }
      }
    }
  }

  private _onKernelDisposed(kernel: Kernel.IKernelConnection): void {
    const conn = this._connections.get(kernel.id);
    if (!conn || conn.kernel !== kernel) {
      return;
    }
    this._connections.delete(kernel.id);
    if (this._current === conn) {
      this._current = null;
      this._currentChanged.emit(null);
    }
  }

  /** Dispose a connection the panel no longer shows (closes its comm). */
  private _drop(conn: TorchDbgConnection): void {
    if (this._connections.get(conn.kernel.id) === conn) {
      this._connections.delete(conn.kernel.id);
    }
    conn.dispose();
  }

  private _connectionFor(kernel: Kernel.IKernelConnection): TorchDbgConnection {
    let conn = this._connections.get(kernel.id);
    if (!conn || conn.isDisposed) {
      conn = new TorchDbgConnection({ kernel, autoLoad: this._autoLoad });
      const created = conn;
      // what ran since the last exception, also while another kernel was shown
      this._outcomes.watch(kernel);
      const lastOk = this._outcomes.lastOk(kernel.id);
      if (lastOk !== null) {
        created.model.exception.cellFinishedOk(lastOk);
      }
      this._connections.set(kernel.id, created);
      // Connected once per kernel however often the user comes back to it.
      kernel.disposed.connect(this._onKernelDisposed, this);
      void created.connect();
    }
    return conn;
  }

  private _autoLoad: boolean;
  private _outcomes = new CellOutcomes();
  private _current: TorchDbgConnection | null = null;
  private _widget: ISessionWidget | null = null;
  private _connections = new Map<string, TorchDbgConnection>();
  private _currentChanged = new Signal<this, TorchDbgConnection | null>(this);
  private _disposed = false;
}

export namespace KernelTracker {
  export interface IOptions {
    autoLoad?: boolean;
  }
}
