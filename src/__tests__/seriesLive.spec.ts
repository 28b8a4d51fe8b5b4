/**
 * @jest-environment jsdom
 *
 * The series list while data streams: re-rendered on the shared live clock,
 * not while it is out of sight (its panel hidden or scrolled away), and
 * caught up as soon as it is back in sight.
 */
import { act, mountEach, React } from './dom';
import { TorchDbgModel } from '../model/model';
import type { SeriesPanel as SeriesPanelT } from '../panels/series/body';
import { encodeBlock } from './fakeKernel';
import { trans } from './translate';

/** An IntersectionObserver the test drives: `report(node, inView)`. */
class DrivenObserver {
  static all: DrivenObserver[] = [];
  constructor(cb: (entries: IntersectionObserverEntry[]) => void) {
    this.cb = cb;
    DrivenObserver.all.push(this);
  }
  observe(node: Element): void {
    this.nodes.add(node);
  }
  unobserve(node: Element): void {
    this.nodes.delete(node);
  }
  disconnect(): void {
    this.nodes.clear();
  }
  cb: (entries: IntersectionObserverEntry[]) => void;
  nodes = new Set<Element>();
}

function report(node: Element, isIntersecting: boolean): void {
  for (const o of DrivenObserver.all) {
    if (o.nodes.has(node)) {
      o.cb([{ target: node, isIntersecting } as IntersectionObserverEntry]);
    }
  }
}

Object.assign(globalThis, { IntersectionObserver: DrivenObserver });

/* eslint-disable @typescript-eslint/no-require-imports */
const {
  SeriesPanel
}: { SeriesPanel: typeof SeriesPanelT } = require('../panels/series/body');
/* eslint-enable @typescript-eslint/no-require-imports */

const dom = mountEach();
let seq = 0;

function logged(m: TorchDbgModel, names: string[]): void {
  const b = encodeBlock(
    [1, 2],
    names.map(() => [0.5, 0.25])
  );
  m.applySeries(
    { method: 'series', seq: seq++, blocks: [{ id: seq, names, count: 2 }] },
    [b.x, b.y]
  );
}

const count = () =>
  dom.host.querySelector('.jp-TorchDbg-seriesCount')?.textContent ?? '';

/** Frames and timers run (real ones: the clock's interval is 200 ms). */
async function settle(ms = 500): Promise<void> {
  await act(async () => {
    await new Promise(resolve => setTimeout(resolve, ms));
  });
}

beforeEach(() => {
  window.localStorage.clear();
  seq = 0;
});

it('follows new series while in sight, none while hidden, catches up when shown', async () => {
  const m = new TorchDbgModel();
  logged(m, ['a', 'b']);
  dom.render(React.createElement(SeriesPanel, { model: m, trans }));
  expect(count()).toBe('2 of 2 series');
  const list = dom.host.querySelector('.jp-TorchDbg-seriesList')!;
  expect(list).not.toBeNull();

  // in sight: a new series shows up
  report(list, true);
  logged(m, ['c']);
  await settle();
  expect(count()).toBe('3 of 3 series');

  // hidden (another sidebar tab): the stream goes on, the list stays as it was
  report(list, false);
  logged(m, ['d']);
  logged(m, ['e']);
  await settle();
  expect(count()).toBe('3 of 3 series');

  // shown again: caught up
  report(list, true);
  for (let i = 0; i < 50 && count() !== '5 of 5 series'; i++) {
    await settle(100);
  }
  expect(count()).toBe('5 of 5 series');
});
