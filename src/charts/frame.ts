/** First draws of out-of-view charts per frame (spreads hundreds of new cards). */
const PRIME_PER_FRAME = 2;

/**
 * One animation frame for all charts. A chart registers its node and a draw
 * function, and marks itself dirty when its data changes; one
 * `requestAnimationFrame` per frame draws the dirty charts that are in view.
 * A chart out of view (scrolled away, or the panel hidden: another sidebar tab,
 * collapsed, `display: none`) stays dirty and is drawn when it comes into view
 * (after one first draw, so that it exists).
 *
 * Visibility comes from one shared `IntersectionObserver`; where there is none
 * (jsdom in tests) every chart counts as visible.
 */
export class FrameScheduler {
  constructor(options: FrameScheduler.IOptions = {}) {
    this._raf =
      options.requestFrame ??
      ((cb: () => void) => requestAnimationFrame(() => cb()));
    const IO =
      options.IntersectionObserver ??
      (typeof IntersectionObserver === 'undefined'
        ? null
        : IntersectionObserver);
    this._observer = IO
      ? new IO(entries => this._onIntersect(entries), {
          rootMargin: '64px'
        })
      : null;
  }

  /** Frames requested so far (one per frame with work, at most). */
  get framesRequested(): number {
    return this._requested;
  }

  /** Charts drawn so far (all frames). */
  get draws(): number {
    return this._draws;
  }

  /**
   * Register a chart: `draw` is called in a frame after `markDirty` while
   * `node` is in view (it returns false when it had nothing to draw yet); `onVisible` when it comes into or goes out of view.
   * Returns the handle to mark it dirty and to remove it.
   */
  add(
    node: Element,
    draw: () => boolean | void,
    onVisible?: (visible: boolean) => void
  ): FrameScheduler.IHandle {
    const entry: IEntry = {
      node,
      draw,
      onVisible,
      dirty: false,
      drawn: false,
      visible: this._observer === null
    };
    this._entries.set(node, entry);
    this._observer?.observe(node);
    return {
      markDirty: () => {
        entry.dirty = true;
        if (entry.visible || !entry.drawn) {
          this._request();
        }
      },
      get visible() {
        return entry.visible;
      },
      dispose: () => {
        this._observer?.unobserve(node);
        this._entries.delete(node);
        entry.dirty = false;
      }
    };
  }

  /**
   * Draw the dirty visible charts now (what a frame does). A chart out of view
   * that was never drawn gets one first draw, a few per frame, so that every
   * chart exists (a canvas with its data) before it is scrolled to.
   */
  flush(): void {
    this._pending = false;
    let primed = 0;
    let more = false;
    for (const entry of this._entries.values()) {
      if (!entry.dirty) {
        continue;
      }
      if (!entry.visible) {
        if (entry.drawn) {
          continue;
        }
        if (primed >= PRIME_PER_FRAME) {
          more = true;
          continue;
        }
        primed++;
      }
      entry.dirty = false;
      this._draws++;
      try {
        // false: nothing to draw yet (no width, no data): a first draw is still owed
        entry.drawn = entry.draw() !== false || entry.drawn;
      } catch (e) {
        console.error('torchdbg: a chart failed to draw', e);
      }
    }
    if (more) {
      this._request();
    }
  }

  private _request(): void {
    if (!this._pending) {
      this._pending = true;
      this._requested++;
      this._raf(() => this.flush());
    }
  }

  private _onIntersect(entries: IntersectionObserverEntry[]): void {
    let wake = false;
    for (const e of entries) {
      const entry = this._entries.get(e.target);
      if (entry) {
        const was = entry.visible;
        entry.visible = e.isIntersecting;
        wake = wake || (entry.visible && entry.dirty);
        if (was !== entry.visible) {
          entry.onVisible?.(entry.visible);
        }
      }
    }
    if (wake) {
      this._request();
    }
  }

  private _raf: (cb: () => void) => void;
  private _observer: IntersectionObserver | null;
  private _entries = new Map<Element, IEntry>();
  private _pending = false;
  private _requested = 0;
  private _draws = 0;
}

interface IEntry {
  node: Element;
  draw: () => boolean | void;
  onVisible?: (visible: boolean) => void;
  dirty: boolean;
  /** Drawn at least once (a chart out of view gets one first draw). */
  drawn: boolean;
  visible: boolean;
}

export namespace FrameScheduler {
  export interface IOptions {
    /** Schedules a frame (default `requestAnimationFrame`). */
    requestFrame?: (cb: () => void) => void;
    /** The observer class (default the browser's; none: all visible). */
    IntersectionObserver?: typeof IntersectionObserver;
  }

  /** A registered chart. */
  export interface IHandle {
    /** The data changed: draw in the next frame (when in view). */
    markDirty(): void;
    /** In view at the last report of the observer. */
    readonly visible: boolean;
    dispose(): void;
  }
}

/** The scheduler the panel's charts share. */
export const frames = new FrameScheduler();
