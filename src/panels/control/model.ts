import { ISignal, Signal } from '@lumino/signaling';

import { IControl } from '../../protocol/messages';

/**
 * The training-control state the kernel reports (clip level, pause, LR scale),
 * plus actions the panel sent that wait for the running cell to end (no subshells).
 */
export class ControlModel {
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get state(): IControl | null {
    return this._state;
  }

  /** Actions sent but not yet answered because the kernel is busy without subshells. */
  get pending(): readonly string[] {
    return this._pending;
  }

  apply(msg: IControl): void {
    this._state = msg;
    this._changed.emit();
  }

  addPending(action: string): void {
    this._pending = [...this._pending, action];
    this._changed.emit();
  }

  removePending(action: string): void {
    const i = this._pending.indexOf(action);
    if (i >= 0) {
      this._pending = [
        ...this._pending.slice(0, i),
        ...this._pending.slice(i + 1)
      ];
      this._changed.emit();
    }
  }

  reset(): void {
    this._state = null;
    this._pending = [];
    this._changed.emit();
  }

  private _state: IControl | null = null;
  private _pending: string[] = [];
  private _changed = new Signal<this, void>(this);
}
