import { ISignal, Signal } from '@lumino/signaling';

import type { IControlTarget } from '../../protocol/generated';
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

  /** The optimizers the kernel reports (empty from a kernel before protocol 2.3). */
  get targets(): readonly IControlTarget[] {
    return this._state?.targets ?? [];
  }

  /**
   * The optimizer the LR controls act on: the one the user picked while the
   * kernel still lists it, else the kernel's default `target`, else the first.
   */
  get target(): IControlTarget | null {
    const targets = this.targets;
    return (
      targets.find(t => t.key === this._picked) ??
      targets.find(t => t.key === this._state?.target) ??
      targets[0] ??
      null
    );
  }

  /** Pick the LR controls' optimizer (null: follow the kernel's default). */
  pickTarget(key: string | null): void {
    this._picked = key;
    this._changed.emit();
  }

  /**
   * Whether the kernel says nothing is training (protocol 2.3; an older
   * kernel does not say, and is taken as running).
   */
  get idle(): boolean {
    return this._state?.idle ?? false;
  }

  /** Whether a run is current and steps: what the controls act on now. */
  get running(): boolean {
    const s = this._state;
    if (!s) {
      return false;
    }
    if (s.idle === undefined) {
      return true; // a kernel before 2.3 does not say
    }
    return !s.idle && s.run !== null && s.run !== undefined;
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
    this._picked = null;
    this._changed.emit();
  }

  private _state: IControl | null = null;
  private _pending: string[] = [];
  private _picked: string | null = null;
  private _changed = new Signal<this, void>(this);
}
