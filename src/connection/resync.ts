import type { ActionReply } from './types';

/**
 * One snapshot asked for after a `seq` gap or a block id with no known names
 * (a lost message); later messages do not ask again until it arrives, or
 * until the ask fails or the comm closes.
 */
export class Resync {
  constructor(private readonly _ask: () => Promise<ActionReply>) {}

  /** Ask for a snapshot unless one is on its way. */
  request(): void {
    if (this._asked) {
      return;
    }
    this._asked = true;
    this._ask()
      .then(reply => {
        if (reply.method === 'error') {
          this._asked = false;
        }
      })
      .catch(() => {
        this._asked = false;
      });
  }

  /** A snapshot arrived, or the comm closed: a next gap asks again. */
  clear(): void {
    this._asked = false;
  }

  private _asked = false;
}
