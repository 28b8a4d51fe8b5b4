import { ISignal } from '@lumino/signaling';
import { useEffect, useState } from 'react';

/**
 * Least time between two re-renders of the panel's live views while data
 * streams (5 per second: a live chart still moves visibly, and the browser
 * is not kept busy re-laying out and redrawing at the kernel's message rate).
 */
export const LIVE_INTERVAL_MS = 200;

/**
 * When to re-render a live view of data that changes often: at most once per
 * `interval` ms, on an animation frame, and not at all while the view is out
 * of sight (then once as soon as it is back, if anything changed meanwhile).
 * The first change after a quiet spell ticks at the next frame (no added
 * latency); the last change of a burst always ticks (a view never stays
 * stale). No DOM of its own: timers, frames and the clock are injectable.
 */
export class LiveTicker {
  constructor(options: LiveTicker.IOptions) {
    this._interval = Math.max(0, options.interval);
    this._tick = options.tick;
    this._now = options.now ?? (() => performance.now());
    this._setTimer =
      options.setTimer ?? ((cb, ms) => window.setTimeout(cb, ms));
    this._clearTimer =
      options.clearTimer ?? (id => window.clearTimeout(id as number));
    this._frame =
      options.requestFrame ??
      (cb => {
        const id = requestAnimationFrame(() => cb());
        return () => cancelAnimationFrame(id);
      });
  }

  /** Ticks so far. */
  get ticks(): number {
    return this._ticks;
  }

  /** A change is waiting for its tick. */
  get pending(): boolean {
    return this._pending;
  }

  /** In sight (default true until told otherwise). */
  get visible(): boolean {
    return this._visible;
  }

  /** The data changed: tick once the interval since the last tick is over. */
  poke(): void {
    if (this._disposed) {
      return;
    }
    this._pending = true;
    this._schedule();
  }

  /**
   * The view went out of sight (no ticks) or came back (one tick, at once,
   * when anything changed meanwhile).
   */
  setVisible(visible: boolean): void {
    if (visible === this._visible || this._disposed) {
      return;
    }
    this._visible = visible;
    if (!visible) {
      this._cancel();
    } else if (this._pending) {
      this.catchUp(); // what is shown is old
    }
  }

  /** Tick at the next frame whatever the interval (what is shown is old). */
  catchUp(): void {
    this._last = -Infinity;
    this._cancel();
    this.poke();
  }

  dispose(): void {
    this._disposed = true;
    this._cancel();
  }

  private _schedule(): void {
    if (!this._visible || this._timer !== null || this._cancelFrame) {
      return;
    }
    const wait = this._last + this._interval - this._now();
    if (wait > 0) {
      this._timer = this._setTimer(() => {
        this._timer = null;
        this._schedule();
      }, wait);
      return;
    }
    this._cancelFrame = this._frame(() => {
      this._cancelFrame = null;
      if (!this._pending || !this._visible || this._disposed) {
        return;
      }
      this._pending = false;
      this._last = this._now();
      this._ticks++;
      this._tick();
    });
  }

  private _cancel(): void {
    if (this._timer !== null) {
      this._clearTimer(this._timer);
      this._timer = null;
    }
    if (this._cancelFrame) {
      this._cancelFrame();
      this._cancelFrame = null;
    }
  }

  private _interval: number;
  private _tick: () => void;
  private _now: () => number;
  private _setTimer: (cb: () => void, ms: number) => unknown;
  private _clearTimer: (id: unknown) => void;
  private _frame: (cb: () => void) => () => void;
  private _timer: unknown = null;
  private _cancelFrame: (() => void) | null = null;
  private _pending = false;
  private _visible = true;
  private _disposed = false;
  private _last = -Infinity;
  private _ticks = 0;
}

export namespace LiveTicker {
  export interface IOptions {
    /** Least ms between two ticks. */
    interval: number;
    /** What a tick does (e.g. bump a React state). */
    tick: () => void;
    /** The clock in ms (default `performance.now`). */
    now?: () => number;
    setTimer?: (cb: () => void, ms: number) => unknown;
    clearTimer?: (id: unknown) => void;
    /** Run `cb` at the next frame; returns a cancel function. */
    requestFrame?: (cb: () => void) => () => void;
  }
}

/** One view that a `LiveClock` ticks. */
export interface ILiveSubscription {
  /** Its data changed: tick it at the clock's next tick. */
  poke(): void;
  /** Out of sight: not ticked; back in sight: ticked at once if poked meanwhile. */
  setVisible(visible: boolean): void;
  dispose(): void;
}

/**
 * One `LiveTicker` for many views: the views poked since the last tick are
 * all ticked in the same frame (their DOM and canvas changes drawn together,
 * once per interval, rather than each in a frame of its own).
 */
export class LiveClock {
  constructor(options: Omit<LiveTicker.IOptions, 'tick'>) {
    this._ticker = new LiveTicker({ ...options, tick: () => this._flush() });
  }

  /** Ticks so far. */
  get ticks(): number {
    return this._ticker.ticks;
  }

  subscribe(tick: () => void): ILiveSubscription {
    const sub = { tick, pending: false, visible: true };
    this._subs.add(sub);
    return {
      poke: () => {
        sub.pending = true;
        if (sub.visible) {
          this._ticker.poke();
        }
      },
      setVisible: visible => {
        if (visible === sub.visible) {
          return;
        }
        sub.visible = visible;
        if (visible && sub.pending) {
          this._ticker.catchUp();
        }
      },
      dispose: () => {
        this._subs.delete(sub);
      }
    };
  }

  private _flush(): void {
    for (const sub of [...this._subs]) {
      if (sub.pending && sub.visible) {
        sub.pending = false;
        try {
          sub.tick();
        } catch (e) {
          console.error('torchdbg: a live view failed to update', e);
        }
      }
    }
  }

  private _ticker: LiveTicker;
  private _subs = new Set<{
    tick: () => void;
    pending: boolean;
    visible: boolean;
  }>();
}

/** The clock the panel's live views share. */
export const live = new LiveClock({ interval: LIVE_INTERVAL_MS });

/**
 * Re-render when `signal` fires, on the shared `live` clock: at most once per
 * `LIVE_INTERVAL_MS`, in the same frame as the panel's other live views, and
 * not while `node` (the view; null: always in sight) is out of sight:
 * scrolled away, or its panel hidden. Returns a counter that changes at each
 * tick. No signal (null): never ticks.
 */
export function useLiveTick(
  signal: ISignal<unknown, unknown> | null,
  node: Element | null = null,
  clock: LiveClock = live
): number {
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (!signal) {
      return;
    }
    const sub = clock.subscribe(() => setTick(t => t + 1));
    const onSignal = () => sub.poke();
    signal.connect(onSignal);
    const observer =
      node && typeof IntersectionObserver !== 'undefined'
        ? new IntersectionObserver(entries => {
            const last = entries[entries.length - 1];
            if (last) {
              sub.setVisible(last.isIntersecting);
            }
          })
        : null;
    if (node) {
      observer?.observe(node);
    }
    return () => {
      signal.disconnect(onSignal);
      observer?.disconnect();
      sub.dispose();
    };
  }, [signal, node, clock]);
  return tick;
}
