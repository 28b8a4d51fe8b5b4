/**
 * The jsdom + React setup the DOM specs share (not a spec: jest collects
 * `*.spec.ts` only). Importing it installs what jsdom lacks: a ResizeObserver
 * that never reports (charts observe their size), a `window.matchMedia` that
 * matches nothing (uPlot reads it when it loads) and React's act environment.
 * Import it first, so that it runs before the specs `require` panel and chart
 * modules.
 *
 * There is no IntersectionObserver unless a spec calls
 * `fakeIntersectionObserver()` (before requiring chart modules: the shared
 * frame scheduler looks for one when it loads): without one every chart counts
 * as in view; with the fake, which never reports, every chart is out of view.
 */
import type * as ReactT from 'react';

/** An observer that observes nothing and never reports. */
export class FakeObserver {
  observe(): void {}
  unobserve(): void {}
  disconnect(): void {}
}

Object.assign(globalThis, {
  ResizeObserver: FakeObserver,
  IS_REACT_ACT_ENVIRONMENT: true
});
window.matchMedia = ((query: string) => ({
  matches: false,
  media: query,
  addEventListener: () => undefined,
  removeEventListener: () => undefined
})) as unknown as typeof window.matchMedia;

/** Install an IntersectionObserver that never reports (charts out of view). */
export function fakeIntersectionObserver(): void {
  Object.assign(globalThis, { IntersectionObserver: FakeObserver });
}

/* eslint-disable @typescript-eslint/no-require-imports */
export const React: typeof ReactT = require('react');
// react-dom has no type declarations in this project: the little used here
export interface IRoot {
  render(element: ReactT.ReactNode): void;
  unmount(): void;
}
export const {
  createRoot
}: { createRoot(container: Element): IRoot } = require('react-dom/client');
/* eslint-enable @typescript-eslint/no-require-imports */
export const { act } = React;

/** A React root in a host `<div>` of the document, made afresh for each test. */
export interface IMount {
  /** The host element of the current test. */
  readonly host: HTMLDivElement;
  /** Render into the root, in `act`. */
  render(element: ReactT.ReactElement): void;
  /** Unmount the root and make a new one in the same host (a reopened panel). */
  remount(): void;
}

/**
 * For each test of the calling scope: a host `<div>` added to the document and
 * a React root in it before the test; the root unmounted and the host removed
 * after it (before the `afterEach` hooks registered later in the same scope).
 */
export function mountEach(): IMount {
  let host: HTMLDivElement;
  let root: IRoot;
  beforeEach(() => {
    host = document.createElement('div');
    document.body.appendChild(host);
    root = createRoot(host);
  });
  afterEach(() => {
    act(() => root.unmount());
    host.remove();
  });
  return {
    get host() {
      return host;
    },
    render(element) {
      act(() => root.render(element));
    },
    remount() {
      act(() => root.unmount());
      root = createRoot(host);
    }
  };
}
