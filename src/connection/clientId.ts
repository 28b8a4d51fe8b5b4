import { UUID } from '@lumino/coreutils';

/** Where the tab keeps its id; sessionStorage survives reloads of this tab only. */
const STORAGE_KEY = 'jupyterlab_torchdbg:client-id';

/** The channel live tabs answer on when another tab claims their id. */
const CHANNEL_NAME = 'jupyterlab_torchdbg:client-id';

/** How long a page that found an id waits for a live tab that already holds it. */
const CLAIM_WAIT_MS = 150;

/** The schema's `client_id`: 1 to 64 safe characters. */
const VALID = /^[A-Za-z0-9_-]{1,64}$/;

/** The part of a BroadcastChannel used here (a fake or null in jest). */
export interface IClaimChannel {
  postMessage(message: unknown): void;
  addEventListener(type: 'message', listener: (ev: MessageEvent) => void): void;
  removeEventListener(
    type: 'message',
    listener: (ev: MessageEvent) => void
  ): void;
}

export interface IClaimOptions {
  /** This tab's sessionStorage; null when the browser gives none (no id). */
  storage: Pick<Storage, 'getItem' | 'setItem'> | null;
  /** A BroadcastChannel shared by the origin's tabs; null: no duplicate check. */
  channel: IClaimChannel | null;
  waitMs?: number;
  newId?: () => string;
}

/**
 * Find this tab's client id (R46): the one kept in sessionStorage, so a reload
 * of the tab sends the same id and the kernel closes the comm the old page left
 * behind; a new one for a new tab. A duplicated tab (or one opened by
 * `window.open`) inherits a copy of sessionStorage: a live tab that holds the
 * id answers on `channel`, and the newcomer takes a new id, so two live tabs
 * never share one (R05). Resolves null without storage.
 */
export async function claimClientId(
  options: IClaimOptions
): Promise<string | null> {
  const { storage, channel } = options;
  if (!storage) {
    return null;
  }
  let id: string | null = null;
  try {
    id = storage.getItem(STORAGE_KEY);
  } catch {
    id = null;
  }
  if (id !== null && !VALID.test(id)) {
    id = null;
  }
  if (id !== null && channel) {
    if (await Private.heldElsewhere(channel, id, options.waitMs)) {
      id = null;
    }
  }
  if (id === null) {
    id = (options.newId ?? UUID.uuid4)();
    try {
      storage.setItem(STORAGE_KEY, id);
    } catch {
      // storage full or denied: the id still serves this page
    }
  }
  const mine = id;
  channel?.addEventListener('message', ev => {
    if (Private.isMessage(ev.data, 'claim', mine)) {
      channel.postMessage({ taken: mine });
    }
  });
  return mine;
}

let tabId: Promise<string | null> | null = null;

/** This tab's client id, found once per page (see `claimClientId`). */
export function tabClientId(): Promise<string | null> {
  if (!tabId) {
    const storage = Private.sessionStorage();
    tabId = storage
      ? claimClientId({ storage, channel: Private.channel() })
      : Promise.resolve(null);
  }
  return tabId;
}

namespace Private {
  export function sessionStorage(): Storage | null {
    try {
      return typeof window === 'undefined' ? null : window.sessionStorage;
    } catch {
      return null; // storage disabled (SecurityError)
    }
  }

  export function channel(): IClaimChannel | null {
    try {
      return typeof BroadcastChannel === 'undefined'
        ? null
        : new BroadcastChannel(CHANNEL_NAME);
    } catch {
      return null;
    }
  }

  export function isMessage(
    data: unknown,
    key: 'claim' | 'taken',
    id: string
  ): boolean {
    return (
      typeof data === 'object' &&
      data !== null &&
      (data as Record<string, unknown>)[key] === id
    );
  }

  /** Whether a live tab answers that it holds `id` within `waitMs`. */
  export function heldElsewhere(
    channel: IClaimChannel,
    id: string,
    waitMs = CLAIM_WAIT_MS
  ): Promise<boolean> {
    return new Promise(resolve => {
      const done = (held: boolean) => {
        clearTimeout(timer);
        channel.removeEventListener('message', onMessage);
        resolve(held);
      };
      const onMessage = (ev: MessageEvent) => {
        if (isMessage(ev.data, 'taken', id)) {
          done(true);
        }
      };
      const timer = setTimeout(() => done(false), waitMs);
      channel.addEventListener('message', onMessage);
      channel.postMessage({ claim: id });
    });
  }
}
