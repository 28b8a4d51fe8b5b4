import { ISignal, Signal } from '@lumino/signaling';

import { IMemory, IOom } from '../../protocol/messages';

/** The memory panel's state: devices, breakdown, recording, and the last OOM autopsy. */
export class MemoryModel {
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get status(): IMemory | null {
    return this._status;
  }

  get oom(): IOom | null {
    return this._oom;
  }

  apply(msg: IMemory): void {
    this._status = msg;
    this._changed.emit();
  }

  applyOom(msg: IOom): void {
    this._oom = msg;
    this._changed.emit();
  }

  reset(): void {
    this._status = null;
    this._oom = null;
    this._changed.emit();
  }

  private _status: IMemory | null = null;
  private _oom: IOom | null = null;
  private _changed = new Signal<this, void>(this);
}
