import { ISignal, Signal } from '@lumino/signaling';

import { IException } from '../../protocol/messages';

/**
 * The most recent unhandled exception of a kernel, with the frame the user is
 * looking at (moved up/down like pdb's `u`/`d`).
 */
export class ExceptionModel {
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** A new exception arrived; `replay` ones (from a snapshot) never pop up. */
  get raised(): ISignal<this, IException> {
    return this._raised;
  }

  get current(): IException | null {
    return this._current;
  }

  /** Index in `current.frames` of the selected frame. */
  get frame(): number {
    return this._frame;
  }

  set frame(index: number) {
    const n = this._current?.frames.length ?? 0;
    this._frame = Math.max(0, Math.min(n - 1, index));
    this._changed.emit();
  }

  /** A note for the user about the last action (go to cell, debug). */
  get note(): string {
    return this._note;
  }

  set note(value: string) {
    this._note = value;
    this._changed.emit();
  }

  apply(msg: IException): void {
    if (this._current?.id === msg.id) {
      return;
    }
    this._current = msg;
    this._note = '';
    this._frame =
      msg.diagnosis.where ?? msg.focus ?? Math.max(0, msg.frames.length - 1);
    this._raised.emit(msg);
    this._changed.emit();
  }

  dismiss(): void {
    this._current = null;
    this._frame = 0;
    this._changed.emit();
  }

  private _current: IException | null = null;
  private _frame = 0;
  private _note = '';
  private _changed = new Signal<this, void>(this);
  private _raised = new Signal<this, IException>(this);
}
