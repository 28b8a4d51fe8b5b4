/**
 * @jest-environment jsdom
 *
 * LineChart with a stand-in uPlot (jsdom has no canvas): what it hands uPlot
 * with log-y over non-positive values, with EMA smoothing (raw line kept,
 * faint), and with overlays of earlier runs; drawn only in its frame.
 */
import './dom';
import { FrameScheduler } from '../charts/frame';
import { SeriesRing } from '../model/ringbuffer';

interface IFakePlot {
  opts: any;
  data: any[];
  destroyed: boolean;
}
const plots: IFakePlot[] = [];

jest.mock('uplot', () => {
  class FakeUPlot {
    constructor(opts: any, data: any[]) {
      this.opts = opts;
      this.data = data;
      this.series = opts.series;
      plots.push(this as unknown as IFakePlot);
    }
    setData(data: any[]) {
      this.data = data;
    }
    setSize() {}
    redraw() {}
    destroy() {
      this.destroyed = true;
    }
    opts: any;
    data: any[];
    series: any[];
    destroyed = false;
    static rangeNum(lo: number, hi: number) {
      return [lo, hi];
    }
    static rangeLog(lo: number, hi: number) {
      return [lo, hi];
    }
  }
  return { __esModule: true, default: FakeUPlot };
});

/* eslint-disable @typescript-eslint/no-require-imports */
const {
  LineChart,
  smoothEma,
  DEFAULT_SMOOTHING,
  seriesColor,
  SERIES_PALETTE
}: typeof import('../charts/lineChart') = require('../charts/lineChart');
/* eslint-enable @typescript-eslint/no-require-imports */

function setup() {
  const pending: (() => void)[] = [];
  const scheduler = new FrameScheduler({
    requestFrame: cb => pending.push(cb)
  });
  const chart = new LineChart({
    series: [{ label: 'loss', color: '#123456' }],
    height: 100,
    scheduler
  });
  Object.defineProperty(chart.node, 'clientWidth', { value: 300 });
  const frame = () => pending.splice(0).forEach(cb => cb());
  return { chart, frame, pending };
}

const last = () => plots[plots.length - 1];
const nums = (a: ArrayLike<number | null>) =>
  Array.from(a, v => (v === null || Number.isNaN(v) ? null : v));

describe('LineChart', () => {
  beforeEach(() => {
    plots.length = 0;
  });

  it('draws nothing until its frame, then the ring as it is', () => {
    const { chart, frame, pending } = setup();
    const ring = new SeriesRing(100);
    ring.push([0, 1, 2], [3, 2, 1]);
    chart.setRing(ring);
    expect(plots).toHaveLength(0);
    expect(pending).toHaveLength(1);
    frame();
    expect(nums(last().data[0])).toEqual([0, 1, 2]);
    expect(nums(last().data[1])).toEqual([3, 2, 1]);
    // more points: one more draw, same plot
    ring.push([3], [0.5]);
    chart.setRing(ring);
    chart.setRing(ring);
    expect(pending).toHaveLength(1);
    frame();
    expect(plots).toHaveLength(1);
    expect(nums(last().data[1])).toEqual([3, 2, 1, 0.5]);
    expect(chart.draws).toBe(2);
    chart.dispose();
  });

  it('log-y leaves out values <= 0 (gaps, never a zero on a log axis)', () => {
    const { chart, frame } = setup();
    const ring = new SeriesRing(100);
    ring.push([0, 1, 2, 3, 4], [1, 0, -2, 10, 100]);
    chart.setRing(ring);
    chart.setLog(true);
    frame();
    const u = last();
    expect(u.opts.scales.y.distr).toBe(3);
    const [x, y] = u.data;
    expect(nums(x)).toEqual([0, 1, 2, 3, 4]);
    expect(nums(y)).toEqual([1, null, null, 10, 100]);
    // back to linear: every value again, on a new plot
    chart.setLog(false);
    frame();
    expect(u.destroyed).toBe(true);
    expect(last().opts.scales.y.distr).toBeUndefined();
    expect(nums(last().data[1])).toEqual([1, 0, -2, 10, 100]);
  });

  it("smooths with TensorBoard's debiased EMA, the raw line kept faint under it", () => {
    const { chart, frame } = setup();
    const ys = [4, 2, 8, 6, NaN, 1, 3];
    const ring = new SeriesRing(100);
    ring.push([0, 1, 2], ys.slice(0, 3));
    chart.setRing(ring);
    chart.setSmoothing(DEFAULT_SMOOTHING);
    frame();
    // the rest arrives later: the average carries on (incremental)
    const ring2 = ring;
    ring2.push([3, 4, 5, 6], ys.slice(3));
    chart.setRing(ring2);
    frame();
    const u = last();
    expect(u.opts.series).toHaveLength(3);
    expect(u.opts.series[1].alpha).toBeLessThan(1); // raw, faint
    expect(u.opts.series[2].alpha).toBe(1); // smoothed
    const want = smoothEma(ys, 0.6);
    expect(want[0]).toBeCloseTo(4); // debiased: starts at the first value
    expect(want[1]).toBeCloseTo((0.6 * 0.4 * 4 + 0.4 * 2) / (1 - 0.36));
    expect(nums(u.data[1])).toEqual(nums(Float32Array.from(ys)));
    const got = nums(u.data[2]);
    expect(got[4]).toBeNull(); // a gap stays a gap
    got.forEach((v, i) => {
      if (v !== null) {
        expect(v).toBeCloseTo(want[i], 5);
      }
    });
    chart.setSmoothing(null);
    frame();
    expect(last().opts.series).toHaveLength(2);
  });

  it('draws overlays of earlier runs under the series; they widen the range, within bounds', () => {
    const { chart, frame } = setup();
    const ring = new SeriesRing(100);
    ring.push([0, 1, 2], [1, 2, 3]);
    chart.setRing(ring);
    chart.setOverlays([
      { label: 'run 1', x: [0, 1, 2, 3, 4], y: [5, 6, 7, 8, 9] }
    ]);
    frame();
    const u = last();
    expect(u.opts.hooks.drawAxes).toHaveLength(1);
    expect(u.opts.scales.y.range(u, 1, 3)).toEqual(
      expect.arrayContaining([expect.any(Number), expect.any(Number)])
    );
    const [lo, hi] = u.opts.scales.y.range(u, 1, 3);
    expect(lo).toBeLessThanOrEqual(1);
    expect(hi).toBeGreaterThanOrEqual(6);
    expect(u.opts.scales.x.range(u, 0, 2)).toEqual([0, 4]);
    // an earlier run that exploded widens the range by at most twice this run's span
    chart.setOverlays([{ label: 'run 1', x: [0, 1, 2], y: [1, 1e6, 1e18] }]);
    frame();
    const v = last();
    const [, top] = v.opts.scales.y.range(v, 1, 3);
    expect(top).toBeGreaterThanOrEqual(7);
    expect(top).toBeLessThan(10);
    chart.setOverlays([]);
    frame();
    expect(last().opts.scales.y.range).toBeUndefined();
  });

  it('keeps the run picked to compare with whole in the y range (issue #22, item 9)', () => {
    const { chart, frame } = setup();
    const ring = new SeriesRing(100);
    ring.push([0, 1, 2], [1, 2, 3]);
    chart.setRing(ring);
    // the compared run went to 1e6: its line is not cut off at the top
    chart.setOverlays(
      [{ label: 'run 1', x: [0, 1, 2], y: [1, 1e3, 1e6], compare: true }],
      'run 2'
    );
    frame();
    const u = last();
    const [lo, hi] = u.opts.scales.y.range(u, 1, 3);
    expect(lo).toBeLessThanOrEqual(1);
    expect(hi).toBeGreaterThanOrEqual(1e6);
    // and below the shown run too, on a log axis (positive values only)
    chart.setLog(true);
    chart.setOverlays(
      [{ label: 'run 1', x: [0, 1, 2], y: [1e-9, 0, -5], compare: true }],
      'run 2'
    );
    frame();
    const v = last();
    const [low] = v.opts.scales.y.range(v, 1, 3);
    expect(low).toBeLessThanOrEqual(1e-9);
    expect(low).toBeGreaterThan(0);
  });

  it('names the lines in a legend while earlier runs are drawn: shown, compared, faded', () => {
    const { chart, frame } = setup();
    document.body.appendChild(chart.node);
    const ring = new SeriesRing(100);
    ring.push([0, 1, 2], [1, 2, 3]);
    chart.setRing(ring);
    expect(chart.node.querySelector('.jp-TorchDbg-chartLegend')).toBeNull();
    chart.setOverlays(
      [
        { label: 'run 1', x: [0, 1], y: [1, 2] },
        { label: 'run 2', x: [0, 1], y: [1, 2] },
        { label: 'run 3', x: [0, 1], y: [2, 4], compare: true }
      ],
      'run 4'
    );
    frame();
    const legend = chart.node.querySelector('.jp-TorchDbg-chartLegend')!;
    // under the plot
    expect(chart.node.lastElementChild).toBe(legend);
    const items = Array.from(
      legend.querySelectorAll<HTMLElement>('.jp-TorchDbg-chartLegendItem')
    ).map(el => [el.dataset.kind, el.textContent]);
    expect(items).toEqual([
      ['shown', 'run 4'],
      ['compare', 'run 3'],
      ['faded', 'run 1, run 2 (faded)']
    ]);
    const lines = legend.querySelectorAll<HTMLElement>(
      '.jp-TorchDbg-chartLegendLine'
    );
    expect(lines[0].style.borderTopStyle).toBe('solid');
    expect(lines[1].style.borderTopStyle).toBe('dashed');
    // kernel text never becomes markup: labels are text nodes
    chart.setOverlays(
      [{ label: '<b>x</b>', x: [0], y: [1], compare: true }],
      'run 4'
    );
    expect(legend.querySelector('b')).toBeNull();
    chart.setOverlays([]);
    expect(chart.node.querySelector('.jp-TorchDbg-chartLegend')).toBeNull();
    chart.node.remove();
  });
});

describe('seriesColor', () => {
  it('gives the first 8 series 8 distinct colours', () => {
    // jsdom has no theme: the fallbacks, one per hue
    const colours = Array.from({ length: 8 }, (_, i) => seriesColor(i));
    expect(new Set(colours).size).toBe(8);
    // and 8 distinct theme variables (none two names for one colour)
    const names = Array.from(
      { length: 8 },
      (_, i) => SERIES_PALETTE[i % SERIES_PALETTE.length][0]
    );
    expect(new Set(names).size).toBe(8);
    expect(names).not.toContain('--jp-accent-color1');
    // set by a theme, the variables are what it gives
    document.body.style.setProperty('--jp-brand-color1', '#abcdef');
    expect(seriesColor(0)).toBe('#abcdef');
    expect(seriesColor(8)).toBe('#abcdef');
    document.body.style.removeProperty('--jp-brand-color1');
  });
});
