import { ISignal, Signal } from '@lumino/signaling';

import type {
  ActionName,
  ActionResult,
  ErrorCode,
  IActionArgs
} from '../protocol/messages';
import type { ActionReply } from './types';

/**
 * How one action ended: its typed result, or why not (the kernel's refusal
 * with its code, or `unsent` when the request could not be sent at all).
 */
export type ActionOutcome<K extends ActionName> =
  | { ok: true; action: K; result: ActionResult<K> }
  | { ok: false; action: K; code: ErrorCode | 'unsent'; error: string };

/**
 * The note a panel shows under what it sent: the refusal (or why it was not
 * sent), else `describe` of the result, else nothing.
 */
export function outcomeNote<K extends ActionName>(
  outcome: ActionOutcome<K>,
  describe?: (result: ActionResult<K>) => string
): string {
  if (!outcome.ok) {
    return outcome.error;
  }
  return describe ? describe(outcome.result) : '';
}

/** What the service needs of a connection: the one way to send. */
export interface IActionSender {
  sendAction<K extends ActionName>(
    action: K,
    args: IActionArgs[K],
    onPending?: () => void
  ): Promise<ActionReply<K>>;
}

/**
 * The one front-end path for actions: every panel and command sends through
 * it. It resolves (never rejects) to a typed `ActionOutcome`, and keeps the
 * actions that wait for the running cell to end (a busy kernel without
 * subshells) until their reply comes: `pending`, with `pendingChanged`.
 */
export class ActionService {
  constructor(private readonly _sender: IActionSender) {}

  /** The one service of a connection (made on first use). */
  static of(sender: IActionSender): ActionService {
    let service = SERVICES.get(sender);
    if (!service) {
      service = new ActionService(sender);
      SERVICES.set(sender, service);
    }
    return service;
  }

  /** Actions sent while the kernel was busy and not answered yet, in order. */
  get pending(): readonly ActionName[] {
    return this._pending;
  }

  /** Emitted when `pending` changes. */
  get pendingChanged(): ISignal<this, readonly ActionName[]> {
    return this._pendingChanged;
  }

  /**
   * Send an action. `onPending` is called when it has to wait for the running
   * cell to end; it stays in `pending` until its reply (or failure) comes.
   */
  async send<K extends ActionName>(
    action: K,
    args: IActionArgs[K],
    onPending?: () => void
  ): Promise<ActionOutcome<K>> {
    let waited = false;
    try {
      const reply = await this._sender.sendAction(action, args, () => {
        waited = true;
        this._setPending([...this._pending, action]);
        onPending?.();
      });
      if (reply.method === 'error') {
        return { ok: false, action, code: reply.code, error: reply.message };
      }
      return { ok: true, action, result: reply.result };
    } catch (e) {
      return { ok: false, action, code: 'unsent', error: (e as Error).message };
    } finally {
      if (waited) {
        const i = this._pending.indexOf(action);
        this._setPending([
          ...this._pending.slice(0, i),
          ...this._pending.slice(i + 1)
        ]);
      }
    }
  }

  private _setPending(pending: ActionName[]): void {
    this._pending = pending;
    this._pendingChanged.emit(pending);
  }

  private _pending: ActionName[] = [];
  private _pendingChanged = new Signal<this, readonly ActionName[]>(this);
}

const SERVICES = new WeakMap<IActionSender, ActionService>();
