/**
 * @jest-environment jsdom
 *
 * Hundreds of ranks (issue #25): above 16 ranks the grid shows the outliers
 * (failed / lost / stalled or singled out by an alarm, a non-finite norm, the
 * slowest, the highest and lowest norm when they stand out) and two heatmaps
 * of a cell per rank; the heatmap's layout fits the sidebar and its colour
 * scale spans the finite values.
 */
import { act, mountEach, React } from './dom';
import { type RankNow, RanksModel } from '../panels/ranks/model';
import type { RankScale as RankScaleT } from '../panels/ranks/heatmap';
import {
  heatLayout,
  heatScale,
  LEVELS,
  MAX_CELL,
  MIN_CELL,
  pickOutliers
} from '../panels/ranks/scale';
import type { IRankState, IRanks } from '../protocol/generated';
import { schemaDef } from './schema';
import { trans } from './translate';

/* eslint-disable @typescript-eslint/no-require-imports */
const {
  RankScale
}: { RankScale: typeof RankScaleT } = require('../panels/ranks/heatmap');
/* eslint-enable @typescript-eslint/no-require-imports */

const ranksMessage = schemaDef('Ranks');

function rank(r: number, over: Partial<IRankState> = {}): RankNow {
  return {
    rank: r,
    identity: {
      rank: r,
      world_size: 256,
      local_rank: r % 8,
      host: 'node-a',
      pid: 1000 + r,
      launcher: 'spawn'
    },
    state: 'running',
    step: 40,
    step_time_s: 0.1,
    own_time_s: 0.04,
    grad_norm: 0.42,
    grad_step: 40,
    memory_bytes: 1024,
    memory_kind: 'host',
    last_seen_s: 0.1,
    since_step_s: 0.01,
    clip: null,
    lr_scale: 1,
    phase: 'user',
    ...over
  };
}

/** 256 ranks: 137 slow, 200 with a high norm, 5 with a low one, 9 lost. */
function world(n = 256): RankNow[] {
  return Array.from({ length: n }, (_, r) =>
    rank(r, {
      step_time_s: r === 137 ? 0.6 : 0.1 + (r % 3) * 0.001,
      grad_norm: r === 200 ? 3.4 : r === 5 ? 0.1 : 0.42,
      state: r === 9 ? 'lost' : 'running'
    })
  );
}

const none = () => null;

describe('outliers', () => {
  it('names the ranks in trouble first, then the slowest, highest and lowest norm', () => {
    const ranks = world();
    const trouble = (r: number) => (r === 9 ? ('lost' as const) : null);
    expect(pickOutliers(ranks, trouble)).toEqual([
      { rank: 9, reason: 'lost' },
      { rank: 137, reason: 'slowest' },
      { rank: 200, reason: 'highest_norm' },
      { rank: 5, reason: 'lowest_norm' }
    ]);
  });

  it('none when nothing stands out; a non-finite norm always does', () => {
    const even = Array.from({ length: 64 }, (_, r) => rank(r));
    expect(pickOutliers(even, none)).toEqual([]);
    even[33] = rank(33, { grad_norm: 'NaN' });
    expect(pickOutliers(even, none)).toEqual([
      { rank: 33, reason: 'non_finite' }
    ]);
  });

  it('each rank once, at most the limit', () => {
    const ranks = world();
    const all = (r: number) => (r % 2 ? ('straggler' as const) : null);
    const picked = pickOutliers(ranks, all, 4);
    expect(picked).toHaveLength(4);
    expect(new Set(picked.map(o => o.rank)).size).toBe(4);
    expect(picked.every(o => o.reason === 'straggler')).toBe(true);
  });
});

describe('heatmap layout and scale', () => {
  it('256 ranks in a 250 px sidebar: 16 x 16 cells of 13 px', () => {
    expect(heatLayout(256, 208)).toEqual({
      cols: 16,
      rows: 16,
      cell: 13,
      width: 208,
      height: 208
    });
  });

  it('fits any count: cells within bounds, every rank placed, within the width', () => {
    for (const n of [1, 2, 17, 64, 100, 256, 1000, 4096]) {
      const l = heatLayout(n, 208);
      expect(l.cols * l.rows).toBeGreaterThanOrEqual(n);
      expect(l.width).toBeLessThanOrEqual(208);
      expect(l.cell).toBeLessThanOrEqual(MAX_CELL);
      if (n <= 400) {
        expect(l.cell).toBeGreaterThanOrEqual(MIN_CELL);
      }
    }
    expect(heatLayout(64, 208).cols).toBe(8);
  });

  it('spans the finite values: lowest level 0, highest the last, NaN bad', () => {
    const s = heatScale([0.1, 0.2, null, 0.6, NaN, Infinity]);
    expect([s.lo, s.hi]).toEqual([0.1, 0.6]);
    expect(s.level(0.1)).toBe(0);
    expect(s.level(0.6)).toBe(LEVELS - 1);
    expect(s.level(0.35)).toBe(2);
    expect(s.level(NaN)).toBe('bad');
    expect(s.level(null)).toBeNull();
    expect(heatScale([0.4, 0.4]).level(0.4)).toBe(0); // all equal: nothing stands out
  });
});

const dom = mountEach();

describe('the many-ranks view', () => {
  it('outlier rows only, and a cell per rank with its tooltip', async () => {
    const model = new RanksModel();
    const msg = {
      method: 'ranks',
      replay: false,
      job: {
        id: 1,
        started: 1_700_000_000,
        world_size: 256,
        state: 'running',
        transport: 'ipc',
        paused_at: null,
        pending: null
      },
      ranks: world(),
      points: [],
      alarms: [],
      endpoint: { transport: 'ipc', refused: 0 }
    } as IRanks;
    expect(ranksMessage(msg)).toBe(true);
    await act(async () => {
      model.apply(msg);
      dom.render(React.createElement(RankScale, { model, trans }));
    });
    const rows = Array.from(
      dom.host.querySelectorAll<HTMLElement>('.jp-TorchDbg-rankRow')
    );
    expect(rows.map(r => r.dataset.rank)).toEqual(['9', '137', '200', '5']);
    expect(rows[1].textContent).toContain('slowest');
    expect(rows[2].textContent).toContain('highest norm');
    for (const metric of ['time', 'norm']) {
      const cells = dom.host.querySelectorAll(`[data-metric="${metric}"] rect`);
      expect(cells).toHaveLength(256);
    }
    const slow = dom.host.querySelector(
      '[data-metric="time"] [data-rank="137"]'
    );
    expect(slow!.getAttribute('class')).toBe(`jp-mod-level${LEVELS - 1}`);
    expect(slow!.querySelector('title')!.textContent).toBe(
      'rank 137: 600 ms/step, norm 0.42 (running)'
    );
    const high = dom.host.querySelector(
      '[data-metric="norm"] [data-rank="200"]'
    );
    expect(high!.getAttribute('class')).toBe(`jp-mod-level${LEVELS - 1}`);
    expect(dom.host.textContent).toContain('256 ranks; outliers first');
  });
});
