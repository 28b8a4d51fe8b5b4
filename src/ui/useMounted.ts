import React, { useEffect, useRef } from 'react';

/** What `useMounted` can mount: a chart object owning its DOM node. */
export interface IMountable {
  readonly node: HTMLElement;
  dispose(): void;
}

/**
 * Mount a chart object's node in a React-managed host element.
 *
 * `make` runs after the host is in the DOM, again whenever `deps` change; the previous
 * object is disposed and its node removed (on unmount too). Attach the returned host ref
 * to an empty element; the object ref is null until the first effect has run.
 */
export function useMounted<T extends IMountable>(
  make: () => T,
  deps: React.DependencyList
): [React.RefObject<HTMLDivElement>, React.MutableRefObject<T | null>] {
  const host = useRef<HTMLDivElement>(null);
  const obj = useRef<T | null>(null);
  useEffect(() => {
    const o = make();
    obj.current = o;
    host.current?.appendChild(o.node);
    return () => {
      o.dispose();
      o.node.remove();
      if (obj.current === o) {
        obj.current = null;
      }
    };
  }, deps);
  return [host, obj];
}
