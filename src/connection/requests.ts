import type { Kernel } from '@jupyterlab/services';
import { PromiseDelegate, UUID } from '@lumino/coreutils';

import { ActionName, IActionArgs } from '../protocol/messages';

import { ActionReply } from './types';

/**
 * Requests sent and not yet answered, by request id: each gets exactly one
 * reply (R13), the kernel's ack or error, or a local `failed` error when the
 * connection goes away first.
 */
export class PendingRequests {
  /** Register a request id; the promise resolves with its one reply. */
  add(requestId: string): Promise<ActionReply> {
    const delegate = new PromiseDelegate<ActionReply>();
    this._pending.set(requestId, delegate);
    return delegate.promise;
  }

  /**
   * Send an action on `comm` under a new request id; the promise resolves with
   * its one reply. Throws (and forgets the id) when the comm cannot send.
   */
  send<K extends ActionName>(
    comm: Kernel.IComm,
    action: K,
    args: IActionArgs[K]
  ): Promise<ActionReply<K>> {
    const requestId = UUID.uuid4();
    // the reply to this id answers this action (`resolve` matches by id)
    const reply = this.add(requestId) as Promise<ActionReply<K>>;
    try {
      comm.send({ method: 'action', request_id: requestId, action, args });
    } catch (e) {
      this.delete(requestId);
      throw new Error(`Could not reach the kernel: ${(e as Error).message}`);
    }
    return reply;
  }

  /** Forget a request that could not be sent. */
  delete(requestId: string): void {
    this._pending.delete(requestId);
  }

  /** Deliver the kernel's reply; a reply to an unknown id is ignored. */
  resolve(reply: ActionReply): void {
    const id = reply.request_id;
    const pending = id ? this._pending.get(id) : undefined;
    if (id && pending) {
      this._pending.delete(id);
      pending.resolve(reply);
    }
  }

  /** Answer every pending request with a `failed` error (kernel gone, panel closed). */
  failAll(reason: string): void {
    for (const [id, delegate] of this._pending) {
      delegate.resolve({
        method: 'error',
        request_id: id,
        code: 'failed',
        message: reason
      });
    }
    this._pending.clear();
  }

  private _pending = new Map<string, PromiseDelegate<ActionReply>>();
}
