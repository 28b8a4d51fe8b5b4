/** localStorage key of the dismissed exception ids (a JSON list, newest last). */
export const DISMISSED_KEY = 'jupyterlab_torchdbg:dismissed-exceptions';

/** Ids remembered: enough for every kernel a user switches between. */
const KEEP = 50;

/** Where the dismissed ids live (localStorage; a Map in tests). */
export interface IDismissedStore {
  has(id: string): boolean;
  add(id: string): void;
}

/**
 * The exceptions the user dismissed, by id (`<session>-<n>`: unique per
 * kernel-side session, so per kernel). Kept in this browser's localStorage:
 * a dismissed exception stays dismissed when the panel comes back to its
 * kernel (switching notebooks closes and reopens the comm, whose snapshot
 * re-sends the last exception) and across page reloads. Bounded to the last
 * 50 ids; without storage, remembered until the page reloads.
 */
export class DismissedExceptions implements IDismissedStore {
  has(id: string): boolean {
    return this._read().includes(id);
  }

  add(id: string): void {
    const ids = this._read().filter(i => i !== id);
    ids.push(id);
    this._ids = ids.slice(-KEEP);
    try {
      window.localStorage.setItem(DISMISSED_KEY, JSON.stringify(this._ids));
    } catch {
      // storage disabled: `_ids` remembers it for this page
    }
  }

  private _read(): string[] {
    try {
      const v = JSON.parse(window.localStorage.getItem(DISMISSED_KEY) ?? '[]');
      if (Array.isArray(v)) {
        this._ids = v.filter((i): i is string => typeof i === 'string');
      }
    } catch {
      // storage disabled or garbled: what this page remembers
    }
    return this._ids;
  }

  private _ids: string[] = [];
}

/** The store every panel of this page shares. */
export const dismissedExceptions = new DismissedExceptions();
