import { ISignal, Signal } from '@lumino/signaling';

import { IException } from '../../protocol/messages';
import { dismissedExceptions, IDismissedStore } from './dismissed';

/** Why the exception view is folded to one line: something ran after the error. */
export type Superseded = 'cell_ok' | 'run' | null;

/**
 * The most recent unhandled exception of a kernel, with the frame the user is
 * looking at (moved up/down like pdb's `u`/`d`).
 *
 * It is `superseded` once a later cell finished without error or a run started
 * after it (kernel clock times: `cellFinishedOk`, `runStarted`): the view then
 * folds to one line instead of holding the top of the panel through later
 * training (issue #22). A new exception shows in full again. Dismissed ids are
 * remembered (`dismissed.ts`), so the snapshot that re-sends the last exception
 * when the panel comes back to this kernel does not bring it back.
 */
export class ExceptionModel {
  constructor(options: ExceptionModel.IOptions = {}) {
    this._dismissed = options.dismissed ?? dismissedExceptions;
  }

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

  /**
   * What ran after the current exception (null: nothing yet, or the user
   * unfolded it with `expand`).
   */
  get superseded(): Superseded {
    const exc = this._current;
    if (!exc || this._expanded) {
      return null;
    }
    if (this._lastRun !== null && this._lastRun > exc.time) {
      return 'run';
    }
    if (this._lastOk !== null && this._lastOk > exc.time) {
      return 'cell_ok';
    }
    return null;
  }

  apply(msg: IException): void {
    if (this._current?.id === msg.id || this._dismissed.has(msg.id)) {
      return;
    }
    this._current = msg;
    this._note = '';
    this._expanded = false;
    this._frame =
      msg.diagnosis.where ?? msg.focus ?? Math.max(0, msg.frames.length - 1);
    this._raised.emit(msg);
    this._changed.emit();
  }

  /** A cell finished without error at `time` (Unix seconds, the kernel's clock). */
  cellFinishedOk(time: number): void {
    if (this._lastOk === null || time > this._lastOk) {
      this._lastOk = time;
      this._emitIfSuperseded();
    }
  }

  /** The newest run started at `time` (Unix seconds, the kernel's clock). */
  runStarted(time: number): void {
    if (this._lastRun === null || time > this._lastRun) {
      this._lastRun = time;
      this._emitIfSuperseded();
    }
  }

  /** Show a superseded exception in full again (until the next one). */
  expand(): void {
    this._expanded = true;
    this._changed.emit();
  }

  /** The user is done with it: hide it, and never show this id again. */
  dismiss(): void {
    if (this._current) {
      this._dismissed.add(this._current.id);
    }
    this.clear();
  }

  /** Forget it (the kernel restarted or changed); not a dismissal. */
  clear(): void {
    this._current = null;
    this._frame = 0;
    this._expanded = false;
    this._changed.emit();
  }

  private _emitIfSuperseded(): void {
    if (this._current && this.superseded !== null) {
      this._changed.emit();
    }
  }

  private _dismissed: IDismissedStore;
  private _current: IException | null = null;
  private _frame = 0;
  private _note = '';
  private _expanded = false;
  private _lastOk: number | null = null;
  private _lastRun: number | null = null;
  private _changed = new Signal<this, void>(this);
  private _raised = new Signal<this, IException>(this);
}

export namespace ExceptionModel {
  export interface IOptions {
    /** Where dismissed ids are kept (default: this page's localStorage). */
    dismissed?: IDismissedStore;
  }
}
