import {
  RefObject,
  useCallback,
  useLayoutEffect,
  useRef,
  useState
} from 'react';

/** Cards rendered before the list was first measured (jsdom: never measured). */
export const INITIAL_CARDS = 16;

/** Lists up to this long are rendered whole (every card findable, e.g. by tests). */
export const WINDOW_FROM = 32;

/** A card's height until one rendered card was measured (`contain-intrinsic-size`). */
const ESTIMATED_HEIGHT = 210;

/** The items `[first, last)` of a list rendered as real cards. */
export interface IWindow {
  first: number;
  last: number;
}

/**
 * The items of a list of `count` equal items (`stride` apart, the first at
 * `start`) that overlap the view `[viewTop, viewTop + viewHeight)` widened by
 * `margin` on both sides. All in the same coordinates (e.g. viewport pixels).
 */
export function windowRange(o: {
  viewTop: number;
  viewHeight: number;
  start: number;
  stride: number;
  count: number;
  margin: number;
}): IWindow {
  const stride = Math.max(1, o.stride);
  const top = o.viewTop - o.margin - o.start;
  const bottom = o.viewTop + o.viewHeight + o.margin - o.start;
  const first = Math.min(o.count, Math.max(0, Math.floor(top / stride)));
  const last = Math.min(o.count, Math.max(first, Math.ceil(bottom / stride)));
  return { first, last };
}

/** The nearest ancestor of `node` that scrolls vertically (else the document's). */
function scrollParent(node: HTMLElement): HTMLElement {
  for (let p = node.parentElement; p; p = p.parentElement) {
    const y = getComputedStyle(p).overflowY;
    if (y === 'auto' || y === 'scroll') {
      return p;
    }
  }
  return (document.scrollingElement ?? document.documentElement) as HTMLElement;
}

/** The result of `useListWindow`. */
export interface IListWindow extends IWindow {
  /** Height of one card (measured once one was rendered). */
  height: number;
  /** The list's gap between items. */
  gap: number;
}

/**
 * Which of `count` equal items of the flex column `list` to render as real
 * cards: those within about one screen of its scroll container's view, the rest
 * as spacers (see `spacerHeight`). `itemSelector` matches a real item (one is
 * measured once); `slotSelector` matches a real item or a spacer, direct
 * children of `list`, the first of which starts at item 0. Updated on scroll
 * (one per animation frame), on resize (of the container, the list and what
 * the container holds) and when `key` changes (filter, pins, count).
 */
export function useListWindow(
  list: RefObject<HTMLElement>,
  count: number,
  key: string,
  itemSelector: string,
  slotSelector: string
): IListWindow {
  const [win, setWin] = useState<IListWindow>({
    first: 0,
    last: INITIAL_CARDS,
    height: ESTIMATED_HEIGHT,
    gap: 0
  });
  const measured = useRef(ESTIMATED_HEIGHT);
  const update = useCallback(() => {
    const el = list.current;
    if (!el) {
      return;
    }
    const box = scrollParent(el);
    const view = box.clientHeight;
    if (view <= 0) {
      // hidden (or not laid out): keep the window until shown again
      return;
    }
    const gap = parseFloat(getComputedStyle(el).rowGap) || 0;
    const boxTop =
      box === document.documentElement ? 0 : box.getBoundingClientRect().top;
    // one card in view (off-screen ones may report their intrinsic size)
    for (const card of Array.from(
      el.querySelectorAll<HTMLElement>(itemSelector)
    )) {
      const r = card.getBoundingClientRect();
      if (r.height > 0 && r.bottom > boxTop && r.top < boxTop + view) {
        measured.current = card.offsetHeight;
        break;
      }
    }
    const height = measured.current;
    const slot = el.querySelector<HTMLElement>(slotSelector);
    const start = (slot ?? el).getBoundingClientRect().top;
    const { first, last } = windowRange({
      viewTop: boxTop,
      viewHeight: view,
      start,
      stride: height + gap,
      count,
      margin: view
    });
    setWin(prev =>
      first === prev.first &&
      last === prev.last &&
      height === prev.height &&
      gap === prev.gap
        ? prev
        : { first, last, height, gap }
    );
  }, [list, count, itemSelector, slotSelector]);

  useLayoutEffect(update, [update, key]);

  useLayoutEffect(() => {
    const el = list.current;
    if (!el) {
      return;
    }
    const box = scrollParent(el);
    let frame: number | null = null;
    const onScroll = () => {
      if (frame === null) {
        frame = requestAnimationFrame(() => {
          frame = null;
          update();
        });
      }
    };
    const target: EventTarget = box === document.documentElement ? window : box;
    target.addEventListener('scroll', onScroll, { passive: true });
    window.addEventListener('resize', onScroll, { passive: true });
    const resize =
      typeof ResizeObserver === 'undefined'
        ? null
        : new ResizeObserver(onScroll);
    if (resize) {
      resize.observe(box);
      resize.observe(el);
      // sections above the list growing or shrinking move it
      for (const child of Array.from(box.children)) {
        resize.observe(child);
      }
    }
    return () => {
      target.removeEventListener('scroll', onScroll);
      window.removeEventListener('resize', onScroll);
      resize?.disconnect();
      if (frame !== null) {
        cancelAnimationFrame(frame);
      }
    };
  }, [list, update]);

  if (count <= WINDOW_FROM) {
    return { ...win, first: 0, last: count };
  }
  const first = Math.min(win.first, count);
  return { ...win, first, last: Math.min(Math.max(win.last, first), count) };
}

/** The height of a spacer standing for `n` items (gaps between them included). */
export function spacerHeight(n: number, w: IListWindow): number {
  return n * w.height + Math.max(0, n - 1) * w.gap;
}
