import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useCallback, useRef, useState } from 'react';

import { TorchDbgModel } from '../../model/model';
import { SeriesRing } from '../../model/ringbuffer';
import type { IOverlay } from '../../charts/lineChart';
import { useLiveTick } from '../../charts/live';
import { useSignalRender } from '../../ui/useSignalRender';
import { EXPORT_ALL_EVENT } from './export';
import { SeriesCard } from './seriesCard';
import { spacerHeight, useListWindow } from './window';

/**
 * Names under `grad/` and `param/` (gradient monitor) and `mem/` (memory) are
 * shown in their own sections, not as `log()` series.
 */
export function isMonitorSeries(name: string): boolean {
  return (
    name.startsWith('grad/') ||
    name.startsWith('param/') ||
    name.startsWith('mem/')
  );
}

/** localStorage key of the pinned series names (a JSON list). */
export const PINNED_KEY = 'jupyterlab_torchdbg:pinned-series';

function loadPinned(): string[] {
  try {
    const v = JSON.parse(window.localStorage.getItem(PINNED_KEY) ?? '[]');
    return Array.isArray(v) ? v.filter(n => typeof n === 'string') : [];
  } catch {
    return [];
  }
}

function savePinned(names: readonly string[]): void {
  try {
    window.localStorage.setItem(PINNED_KEY, JSON.stringify(names));
  } catch {
    // not remembered: pins still apply until the page reloads
  }
}

/**
 * A name filter from what the user typed: a case-insensitive regular expression
 * when the text is one (`acc|loss`, `^val/`), else a plain substring match (so
 * `loss(` still finds `loss(train)`). Empty: everything matches.
 */
export function seriesFilter(text: string): {
  test: (name: string) => boolean;
  regex: boolean;
} {
  const q = text.trim();
  if (!q) {
    return { test: () => true, regex: false };
  }
  if (/[.*+?^$|()[\]{}\\]/.test(q)) {
    try {
      const re = new RegExp(q, 'i');
      return { test: name => re.test(name), regex: true };
    } catch {
      // not a valid expression: a substring
    }
  }
  const lower = q.toLowerCase();
  return { test: name => name.toLowerCase().includes(lower), regex: false };
}

/** Pinned series first (in pin order), then the rest in first-logged order. */
export function orderSeries(
  names: readonly string[],
  pinned: readonly string[]
): string[] {
  const set = new Set(names);
  const first = pinned.filter(n => set.has(n));
  const pinnedSet = new Set(first);
  return [...first, ...names.filter(n => !pinnedSet.has(n))];
}

/** A push-pin (currentColor, so the toggle's pressed style colours it). */
function PinGlyph(): JSX.Element {
  return (
    <svg viewBox="0 0 16 16" width="11" height="11" aria-hidden="true">
      <path
        fill="currentColor"
        d="M10.3 1 15 5.7l-1.4 1.4-.9-.9-2.9 2.9.4 3.3-1.4 1.4L5.9 10.9 2 14.8l-.8-.8 3.9-3.9-2.9-2.9 1.4-1.4 3.3.4 2.9-2.9-.9-.9z"
      />
    </svg>
  );
}

/** Props of `SeriesItem`: all of them the same while its series is unchanged. */
interface ISeriesItemProps {
  name: string;
  ring: SeriesRing;
  /** Points ever pushed to `ring`: changes when this series got new points. */
  total: number;
  /** Earlier runs (the model's cached array: the same while unchanged). */
  overlays: IOverlay[];
  /** The shown run's label in the legend ("run 3"). */
  shownLabel: string;
  index: number;
  pinned: boolean;
  /** Stable across renders (so a data message does not re-render the item). */
  onTogglePin: (name: string) => void;
  trans: TranslationBundle;
}

/**
 * One card with its pin; earlier runs of the series as faded overlays.
 * Memoized: a data message re-renders only the items whose series changed.
 */
const SeriesItem = React.memo((props: ISeriesItemProps): JSX.Element => {
  const { name, trans } = props;
  return (
    <div className="jp-TorchDbg-seriesItem" data-pinned={props.pinned}>
      <SeriesCard
        name={name}
        ring={props.ring}
        index={props.index}
        tick={props.total}
        trans={trans}
        overlays={props.overlays}
        shownLabel={props.shownLabel}
        headerExtra={
          <button
            type="button"
            className="jp-TorchDbg-chartToggle jp-TorchDbg-pin"
            aria-pressed={props.pinned}
            aria-label={trans.__('Pin %1', name)}
            title={
              props.pinned
                ? trans.__('Unpin (pinned series stay at the top)')
                : trans.__('Pin to the top')
            }
            onClick={() => props.onTogglePin(name)}
          >
            <PinGlyph />
          </button>
        }
      />
    </div>
  );
});

/**
 * The logged series of the shown run, one live chart each: a name filter
 * ("n of m series") and pins (pinned first, remembered in this browser).
 */
export function SeriesPanel(props: {
  model: TorchDbgModel;
  trans: TranslationBundle;
}): JSX.Element {
  // the list's node (or the empty note's): live updates only while it is in sight
  const [node, setNode] = useState<HTMLDivElement | null>(null);
  const list = useRef<HTMLDivElement | null>(null);
  const setList = useCallback((el: HTMLDivElement | null) => {
    list.current = el;
    setNode(el);
  }, []);
  // new points: at most a few re-renders per second (each redraws the cards in view)
  useLiveTick(props.model.dataChanged, node);
  useSignalRender(props.model.runs.changed);
  const { trans, model } = props;
  const [query, setQuery] = useState('');
  const [pinned, setPinned] = useState<string[]>(loadPinned);
  const togglePin = useCallback((name: string) => {
    setPinned(prev => {
      const next = prev.includes(name)
        ? prev.filter(n => n !== name)
        : [...prev, name];
      savePinned(next);
      return next;
    });
  }, []);
  const all = [...model.series.keys()].filter(n => !isMonitorSeries(n));
  const filter = seriesFilter(query);
  const shown = orderSeries(all, pinned).filter(filter.test);
  // only the cards within about a screen of the view are real (hundreds of
  // cards otherwise cost React, layout, paint and intersection work per frame)
  const win = useListWindow(
    list,
    shown.length,
    `${shown.length}\n${query}\n${pinned.join('\n')}`,
    ':scope > .jp-TorchDbg-seriesItem',
    ':scope > .jp-TorchDbg-seriesItem, :scope > .jp-TorchDbg-seriesSpacer'
  );
  if (all.length === 0) {
    return (
      <div className="jp-TorchDbg-empty jp-TorchDbg-seriesEmpty" ref={setList}>
        <p>{trans.__('Nothing logged yet. In your training loop:')}</p>
        <pre className="jp-TorchDbg-code">
          {'from jupyterlab_torchdbg import log\n…\nlog(loss=loss)'}
        </pre>
        <p>
          {trans.__('Each name becomes a live chart here while the cell runs.')}
        </p>
      </div>
    );
  }
  // colours follow the first-logged order, whatever the filter and pins
  const colour = new Map(all.map((n, i) => [n, i]));
  const above = win.first;
  const below = shown.length - win.last;
  return (
    <div className="jp-TorchDbg-seriesList" ref={setList}>
      <div className="jp-TorchDbg-seriesTools">
        {(all.length > 1 || query) && (
          <input
            type="search"
            className="jp-TorchDbg-seriesFilter"
            placeholder={trans.__('filter: loss, ^val/, acc|loss')}
            aria-label={trans.__('Filter series by name')}
            title={trans.__(
              'Part of a name, or a regular expression (case-insensitive)'
            )}
            value={query}
            onChange={e => setQuery(e.currentTarget.value)}
          />
        )}
        {(all.length > 1 || query) && (
          <span className="jp-TorchDbg-seriesCount">
            {trans.__(
              '%1 of %2 series',
              String(shown.length),
              String(all.length)
            )}
          </span>
        )}
        <button
          type="button"
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small jp-TorchDbg-exportAll"
          onClick={e =>
            e.currentTarget.dispatchEvent(
              new CustomEvent(EXPORT_ALL_EVENT, { bubbles: true })
            )
          }
          title={trans.__(
            'Every run, series (logged, gradient and weight norms, memory) and alarm as one table kernel,run,series,step,time,value,text, saved beside the notebook'
          )}
        >
          {trans.__('CSV')}
        </button>
      </div>
      {above > 0 && (
        <div
          key="spacer-above"
          className="jp-TorchDbg-seriesSpacer"
          style={{ height: spacerHeight(above, win) }}
          aria-hidden="true"
        />
      )}
      {shown.slice(win.first, win.last).map(name => {
        const ring = model.series.get(name)!;
        return (
          <SeriesItem
            key={name}
            name={name}
            ring={ring}
            total={ring.total}
            overlays={model.overlayData(name)}
            shownLabel={trans.__('run %1', String(model.runs.shown))}
            index={colour.get(name) ?? 0}
            pinned={pinned.includes(name)}
            onTogglePin={togglePin}
            trans={trans}
          />
        );
      })}
      {below > 0 && (
        <div
          key="spacer-below"
          className="jp-TorchDbg-seriesSpacer"
          style={{ height: spacerHeight(below, win) }}
          aria-hidden="true"
        />
      )}
      {shown.length === 0 && (
        <p className="jp-TorchDbg-muted">
          {trans.__('No series name matches "%1".', query)}
        </p>
      )}
    </div>
  );
}
