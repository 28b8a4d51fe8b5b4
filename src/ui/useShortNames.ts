import { useEffect, useMemo, useState } from 'react';

import { IShortNames, shortNames } from './shortNames';

/** A canvas context to measure text with (none in jsdom). */
let measureContext: CanvasRenderingContext2D | null | undefined;

function context(): CanvasRenderingContext2D | null {
  if (measureContext === undefined) {
    try {
      measureContext = document.createElement('canvas').getContext('2d');
    } catch {
      measureContext = null;
    }
  }
  return measureContext;
}

/**
 * `shortNames` for the column whose box is `node`: labels that fit its
 * content width in its font, recomputed when the column is resized or the
 * names change. Before the first measure (and where text cannot be measured)
 * the names are given whole and the column's own ellipsis cuts them.
 */
export function useShortNames(
  names: readonly string[],
  node: HTMLElement | null
): IShortNames {
  const [box, setBox] = useState<{ width: number; font: string } | null>(null);
  useEffect(() => {
    if (!node || typeof ResizeObserver === 'undefined') {
      return;
    }
    const measure = () => {
      const style = getComputedStyle(node);
      const width =
        node.clientWidth -
        parseFloat(style.paddingLeft || '0') -
        parseFloat(style.paddingRight || '0');
      const font = `${style.fontSize} ${style.fontFamily}`;
      setBox(old =>
        old && old.width === width && old.font === font ? old : { width, font }
      );
    };
    const observer = new ResizeObserver(measure);
    observer.observe(node);
    measure();
    return () => observer.disconnect();
  }, [node]);
  const key = names.join('\n');
  return useMemo(() => {
    const ctx = box && box.width > 0 ? context() : null;
    if (!box || !ctx) {
      return shortNames(names, () => true);
    }
    ctx.font = box.font;
    // (half a pixel of slack: the column's ellipsis is the safety net)
    return shortNames(
      names,
      label => ctx.measureText(label).width <= box.width + 0.5
    );
  }, [key, box?.width, box?.font]);
}
