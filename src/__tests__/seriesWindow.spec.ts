/**
 * @jest-environment jsdom
 *
 * The series list renders real cards only near the scroll view: the window's
 * arithmetic, the first render (before any layout) and the window following a
 * scroll, with the filter and pins applied before the window.
 */
import { act, fakeIntersectionObserver, mountEach, React } from './dom';
import { TorchDbgModel } from '../model/model';
import type { SeriesPanel as SeriesPanelT } from '../panels/series/body';
import type * as WindowT from '../panels/series/window';
import { encodeBlock } from './fakeKernel';
import { trans } from './translate';

fakeIntersectionObserver();

/* eslint-disable @typescript-eslint/no-require-imports */
const {
  SeriesPanel
}: { SeriesPanel: typeof SeriesPanelT } = require('../panels/series/body');
const {
  windowRange,
  INITIAL_CARDS
}: typeof WindowT = require('../panels/series/window');
/* eslint-enable @typescript-eslint/no-require-imports */

beforeEach(() => window.localStorage.clear());
const dom = mountEach();

function logged(m: TorchDbgModel, names: string[]): void {
  const b = encodeBlock(
    [1, 2],
    names.map(() => [0.5, 0.25])
  );
  m.applySeries(
    { method: 'series', seq: 0, blocks: [{ id: 1, names, count: 2 }] },
    [b.x, b.y]
  );
}

const NAMES = Array.from(
  { length: 100 },
  (_, i) => `s${String(i).padStart(3, '0')}`
);

function cards(): string[] {
  return Array.from(dom.host.querySelectorAll('.jp-TorchDbg-seriesCard')).map(
    c => c.getAttribute('data-series') ?? ''
  );
}

function spacers(): number[] {
  return Array.from(
    dom.host.querySelectorAll<HTMLElement>('.jp-TorchDbg-seriesSpacer')
  ).map(s => parseFloat(s.style.height));
}

describe('windowRange', () => {
  const base = { viewHeight: 500, stride: 100, count: 100, margin: 500 };
  it('takes the items within a margin of the view', () => {
    // list starts at the view's top: items 0..9 (view + one screen below)
    expect(windowRange({ ...base, viewTop: 0, start: 0 })).toEqual({
      first: 0,
      last: 10
    });
    // scrolled by 3000 px: items 25..40
    expect(windowRange({ ...base, viewTop: 0, start: -3000 })).toEqual({
      first: 25,
      last: 40
    });
  });
  it('clamps to the list', () => {
    expect(windowRange({ ...base, viewTop: 0, start: -20000 })).toEqual({
      first: 100,
      last: 100
    });
    expect(windowRange({ ...base, viewTop: 0, start: 5000 })).toEqual({
      first: 0,
      last: 0
    });
    expect(windowRange({ ...base, count: 3, viewTop: 0, start: 0 })).toEqual({
      first: 0,
      last: 3
    });
  });
});

describe('SeriesPanel window', () => {
  it('renders the first cards and one spacer for the rest before layout', () => {
    const m = new TorchDbgModel();
    logged(m, NAMES);
    dom.render(React.createElement(SeriesPanel, { model: m, trans }));
    expect(cards()).toEqual(NAMES.slice(0, INITIAL_CARDS));
    expect(spacers()).toHaveLength(1);
    expect(spacers()[0]).toBeGreaterThan(0);
    // the count is of all the series, not the rendered cards
    expect(
      dom.host.querySelector('.jp-TorchDbg-seriesCount')?.textContent
    ).toBe('100 of 100 series');
  });

  it('follows the scroll container, after the filter and pins', async () => {
    // a 500 px scroll view at the top of the page; cards 100 px, no gap
    const host = dom.host;
    host.style.overflowY = 'auto';
    let scrollTop = 0;
    Object.defineProperty(host, 'clientHeight', {
      configurable: true,
      get: () => 500
    });
    const rect = (top: number, height: number) =>
      ({ top, bottom: top + height, height }) as DOMRect;
    const item = (el: Element) =>
      el.classList.contains('jp-TorchDbg-seriesItem') ||
      el.classList.contains('jp-TorchDbg-seriesSpacer');
    const rectSpy = jest
      .spyOn(Element.prototype, 'getBoundingClientRect')
      .mockImplementation(function (this: Element) {
        if (this === host) {
          return rect(0, 500);
        }
        if (item(this)) {
          // the first slot (item 0) is 40 px below the list's top
          const slots = Array.from(this.parentElement!.children).filter(item);
          const i = slots.indexOf(this);
          return rect(40 - scrollTop + i * 100, 100);
        }
        return rect(-scrollTop, 10000);
      });
    const heightSpy = jest
      .spyOn(HTMLElement.prototype, 'offsetHeight', 'get')
      .mockImplementation(function (this: HTMLElement) {
        return this.classList.contains('jp-TorchDbg-seriesItem') ? 100 : 0;
      });
    try {
      window.localStorage.setItem(
        'jupyterlab_torchdbg:pinned-series',
        JSON.stringify(['s099'])
      );
      const m = new TorchDbgModel();
      logged(m, NAMES);
      dom.render(React.createElement(SeriesPanel, { model: m, trans }));
      // view + one screen below: 10 cards, the pinned one first
      expect(cards()).toEqual(['s099', ...NAMES.slice(0, 9)]);
      expect(spacers()).toEqual([90 * 100]);
      // scrolled 3000 px: items 24..39 of the pinned-first order
      scrollTop = 3000;
      await act(async () => {
        host.dispatchEvent(new Event('scroll'));
        await new Promise(resolve => setTimeout(resolve, 50));
      });
      expect(cards()).toEqual(NAMES.slice(23, 39));
      expect(spacers()).toEqual([24 * 100, 60 * 100]);
      // the filter applies first: 10 names match, all of them fit
      const input = host.querySelector(
        '.jp-TorchDbg-seriesFilter'
      ) as HTMLInputElement;
      const setValue = Object.getOwnPropertyDescriptor(
        HTMLInputElement.prototype,
        'value'
      )!.set!;
      scrollTop = 0;
      act(() => {
        setValue.call(input, '^s09');
        input.dispatchEvent(new Event('input', { bubbles: true }));
      });
      expect(cards()).toEqual(['s099', ...NAMES.slice(90, 99)]);
      expect(spacers()).toEqual([]);
    } finally {
      rectSpy.mockRestore();
      heightSpy.mockRestore();
      host.style.overflowY = '';
      delete (host as unknown as { clientHeight?: number }).clientHeight;
    }
  });
});
