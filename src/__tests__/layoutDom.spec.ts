/**
 * @jest-environment jsdom
 *
 * The layout rendered with React in jsdom: sections remember their open state, the
 * Now strip shows its figures (and "—" with a reason), the alarm list puts the
 * first alarm first and marks a step on click, the series filter counts "n of m"
 * and pins are remembered.
 */
import { act, fakeIntersectionObserver, mountEach, React } from './dom';
import { TorchDbgModel } from '../model/model';
import type { AlertList as AlertListT } from '../panels/grads/alertList';
import type { SeriesPanel as SeriesPanelT } from '../panels/series/body';
import type { IAlertItem } from '../protocol/messages';
import type { NowStrip as NowStripT } from '../sidebar/nowStrip';
import type { Section as SectionT } from '../sidebar/section';
import { encodeBlock } from './fakeKernel';
import { trans, XSS } from './translate';

fakeIntersectionObserver();

/* eslint-disable @typescript-eslint/no-require-imports */
const { Section }: { Section: typeof SectionT } = require('../sidebar/section');
const {
  NowStrip
}: { NowStrip: typeof NowStripT } = require('../sidebar/nowStrip');
const {
  AlertList
}: { AlertList: typeof AlertListT } = require('../panels/grads/alertList');
const {
  SeriesPanel
}: { SeriesPanel: typeof SeriesPanelT } = require('../panels/series/body');
/* eslint-enable @typescript-eslint/no-require-imports */

beforeEach(() => window.localStorage.clear());
const dom = mountEach();
const { render } = dom;

/** Run the frame-throttled re-renders (useSignalRender) now. */
async function frames(): Promise<void> {
  await act(async () => {
    await new Promise(resolve => setTimeout(resolve, 50));
  });
}

function alarm(id: string, step: number, time: number): IAlertItem {
  return {
    id,
    source: 'grads',
    kind: 'explosion',
    severity: 'warning',
    step,
    layer: 'model.rnn',
    message: `the total norm grew x100 in 3 steps at step ${step}, carried by \`model.rnn\` (a long sentence that must be shown whole)`,
    remedy: 'lower the learning rate or clip gradients',
    track: 'opt',
    value: 1e6,
    time
  };
}

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

describe('Section', () => {
  it('remembers collapsed per section id across a remount', () => {
    const tree = () =>
      React.createElement(
        React.Fragment,
        null,
        React.createElement(Section, {
          id: 'a',
          title: 'A',
          children: 'body a'
        }),
        React.createElement(Section, {
          id: 'b',
          title: 'B',
          children: 'body b'
        })
      );
    render(tree());
    expect(dom.host.textContent).toContain('body a');
    const header = dom.host.querySelector(
      '[data-section="a"] .jp-TorchDbg-sectionHeader'
    ) as HTMLButtonElement;
    act(() => header.click());
    expect(dom.host.textContent).not.toContain('body a');
    expect(header.getAttribute('aria-expanded')).toBe('false');
    // a fresh mount (a page reload) reads the remembered state
    dom.remount();
    render(tree());
    expect(dom.host.textContent).not.toContain('body a');
    expect(dom.host.textContent).toContain('body b');
  });
});

describe('Section reopenOn', () => {
  it('opens a collapsed section again when a new exception arrives', () => {
    const tree = (id: string) =>
      React.createElement(Section, {
        id: 'exception',
        title: 'Exception',
        reopenOn: id,
        children: 'the diagnosis'
      });
    render(tree('e1'));
    act(() =>
      (
        dom.host.querySelector(
          '.jp-TorchDbg-sectionHeader'
        ) as HTMLButtonElement
      ).click()
    );
    expect(dom.host.textContent).not.toContain('the diagnosis');
    render(tree('e1'));
    expect(dom.host.textContent).not.toContain('the diagnosis');
    render(tree('e2'));
    expect(dom.host.textContent).toContain('the diagnosis');
  });
});

describe('NowStrip', () => {
  it('says why a figure is missing, then shows the live ones', async () => {
    const m = new TorchDbgModel();
    const onShowAlarms = jest.fn();
    render(React.createElement(NowStrip, { model: m, trans, onShowAlarms }));
    const loss = () =>
      dom.host.querySelector('.jp-TorchDbg-nowLoss') as HTMLElement;
    expect(loss().textContent).toContain('—');
    expect(loss().title).toMatch(/log\(loss=loss\)/);
    const alarms = dom.host.querySelector(
      '.jp-TorchDbg-nowAlarms'
    ) as HTMLButtonElement;
    expect(alarms.disabled).toBe(true);

    logged(m, ['acc', 'loss']);
    m.control.apply({
      method: 'control',
      clip: null,
      paused: false,
      paused_at: null,
      step: 120,
      lr_scale: null,
      optimizers: ['opt'],
      last_refusal: null,
      idle: false
    });
    m.grads.applyAlert({ method: 'alert', alerts: [alarm('a1', 3, 1)] });
    await frames();
    expect(loss().textContent).toBe('loss0.25');
    expect(
      dom.host.querySelector('.jp-TorchDbg-nowStep')?.textContent
    ).toContain('120');
    expect(alarms.disabled).toBe(false);
    expect(alarms.textContent).toBe('1 alarm');
    act(() => alarms.click());
    expect(onShowAlarms).toHaveBeenCalled();

    m.control.apply({ ...m.control.state!, idle: true });
    await frames();
    expect(dom.host.querySelector('.jp-TorchDbg-now')?.textContent).toContain(
      'Idle: nothing is training'
    );
  });
});

describe('AlertList', () => {
  it('shows the first alarm first, the latest highlighted, and marks a step', () => {
    const m = new TorchDbgModel();
    // given newest first: shown oldest first anyway
    const alerts = [alarm('a3', 30, 3), alarm('a2', 20, 2), alarm('a1', 10, 1)];
    render(React.createElement(AlertList, { alerts, model: m, trans }));
    const items = Array.from(dom.host.querySelectorAll('.jp-TorchDbg-alert'));
    expect(items.map(li => li.getAttribute('data-step'))).toEqual([
      '10',
      '20',
      '30'
    ]);
    expect(items[0].classList.contains('jp-mod-first')).toBe(true);
    expect(items[2].classList.contains('jp-mod-latest')).toBe(true);
    // the whole sentence is there (no cut)
    expect(items[0].textContent).toContain('must be shown whole');
    act(() =>
      (
        items[1].querySelector('.jp-TorchDbg-alertMessage') as HTMLElement
      ).click()
    );
    expect(m.grads.focusStep).toBe(20);
  });

  it('hides the middle of a long list behind "show more", never the first', () => {
    const m = new TorchDbgModel();
    const alerts = Array.from({ length: 12 }, (_, i) =>
      alarm(`a${i}`, i + 1, i)
    );
    render(React.createElement(AlertList, { alerts, model: m, trans }));
    const steps = () =>
      Array.from(dom.host.querySelectorAll('.jp-TorchDbg-alert')).map(li =>
        li.getAttribute('data-step')
      );
    expect(steps()[0]).toBe('1');
    expect(steps()).toHaveLength(8);
    const more = dom.host.querySelector(
      '.jp-TorchDbg-alertMore'
    ) as HTMLButtonElement;
    expect(more.textContent).toBe('show 4 more alarms');
    act(() => more.click());
    expect(steps()).toHaveLength(12);
  });
});

describe('SeriesPanel', () => {
  it('filters by name ("n of m series") and remembers pins', async () => {
    const m = new TorchDbgModel();
    logged(m, ['loss', 'acc', 'val/loss', XSS, 'grad/opt/total']);
    render(React.createElement(SeriesPanel, { model: m, trans }));
    const names = () =>
      Array.from(dom.host.querySelectorAll('.jp-TorchDbg-seriesCard')).map(c =>
        c.getAttribute('data-series')
      );
    expect(names()).toEqual(['loss', 'acc', 'val/loss', XSS]);
    expect(dom.host.querySelector('img')).toBeNull();
    const count = () =>
      dom.host.querySelector('.jp-TorchDbg-seriesCount')?.textContent;
    expect(count()).toBe('4 of 4 series');
    const input = dom.host.querySelector(
      '.jp-TorchDbg-seriesFilter'
    ) as HTMLInputElement;
    // React listens to the native input event; set the value through the prototype
    const setValue = Object.getOwnPropertyDescriptor(
      HTMLInputElement.prototype,
      'value'
    )!.set!;
    act(() => {
      setValue.call(input, 'loss');
      input.dispatchEvent(new Event('input', { bubbles: true }));
    });
    expect(names()).toEqual(['loss', 'val/loss']);
    expect(count()).toBe('2 of 4 series');
    act(() => {
      setValue.call(input, '');
      input.dispatchEvent(new Event('input', { bubbles: true }));
    });
    const pin = dom.host.querySelector(
      '[data-series="acc"] .jp-TorchDbg-pin'
    ) as HTMLButtonElement;
    act(() => pin.click());
    expect(names()[0]).toBe('acc');
    // remembered: a fresh panel puts it first too
    dom.remount();
    render(React.createElement(SeriesPanel, { model: m, trans }));
    expect(names()[0]).toBe('acc');
    expect(
      dom.host
        .querySelector('[data-series="acc"] .jp-TorchDbg-pin')
        ?.getAttribute('aria-pressed')
    ).toBe('true');
  });
});
