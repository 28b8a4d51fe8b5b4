import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { TorchDbgConnection } from './connection';

/** A widget with a session context (notebook panel, console panel). */
export interface ISessionWidget {
  readonly sessionContext: ISessionContext;
  readonly title: { label: string };
}

/**
 * Follows the active notebook or console and keeps one connection per kernel.
 * `current` is the connection of the active document's kernel (or null), and
 * `currentChanged` fires when the user switches documents or kernels.
 */
export class KernelTracker implements IDisposable {
  constructor(options: KernelTracker.IOptions) {
    this._autoLoad = options.autoLoad ?? true;
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

  /** All live connections (one per kernel). */
  get connections(): TorchDbgConnection[] {
    return [...this._connections.values()];
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
  }

  private _connectionFor(kernel: Kernel.IKernelConnection): TorchDbgConnection {
    let conn = this._connections.get(kernel.id);
    if (!conn || conn.isDisposed) {
      conn = new TorchDbgConnection({ kernel, autoLoad: this._autoLoad });
      const created = conn;
      this._connections.set(kernel.id, created);
      kernel.disposed.connect(() => {
        if (this._connections.get(kernel.id) === created) {
          this._connections.delete(kernel.id);
        }
        if (this._current === created) {
          this._current = null;
          this._currentChanged.emit(null);
        }
      });
      void created.connect();
    }
    return conn;
  }

  private _autoLoad: boolean;
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
