import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect, useLayoutEffect, useRef, useState } from 'react';

import {
  DEFAULT_SMOOTHING,
  IOverlay,
  LineChart,
  seriesColor
} from '../../charts/lineChart';
import { SeriesRing } from '../../model/ringbuffer';
import { formatValue } from '../../ui/formatValue';

/** localStorage key of a series' chart options (log-y, smoothing). */
const STORE_PREFIX = 'jupyterlab-torchdbg:series-view:';

/** A series card's chart options, remembered per series name. */
export interface ISeriesView {
  log: boolean;
  smooth: boolean;
}

/** The remembered options of series `name` (defaults: linear, raw). */
export function loadSeriesView(name: string): ISeriesView {
  try {
    const raw = window.localStorage?.getItem(STORE_PREFIX + name);
    const v = raw ? JSON.parse(raw) : null;
    return { log: v?.log === true, smooth: v?.smooth === true };
  } catch {
    return { log: false, smooth: false };
  }
}

function saveSeriesView(name: string, view: ISeriesView): void {
  try {
    window.localStorage?.setItem(STORE_PREFIX + name, JSON.stringify(view));
  } catch {
    // storage full or disabled: the toggle still works for this session
  }
}

/** Props of `SeriesCard`. */
export interface ISeriesCardProps {
  name: string;
  ring: SeriesRing;
  index: number;
  /** Changes when new points arrived (the model's data tick). */
  tick: number;
  trans: TranslationBundle;
  /** Earlier runs of this series, drawn faded under the current one. */
  overlays?: ReadonlyArray<IOverlay>;
  /** The shown run's name in the chart's legend (with overlays), e.g. "run 3". */
  shownLabel?: string;
  /** Extra header buttons before the chart toggles (the series panel's pin). */
  headerExtra?: React.ReactNode;
}

/** Rings whose card is out of view (scrolled away, or the panel hidden). */
const outOfView = new WeakSet<SeriesRing>();

/**
 * A card out of view is not re-rendered by its parent for new points
 * (hundreds of cards per data tick otherwise); it re-renders itself when it
 * comes into view, and takes the parent's newest points at the parent's next
 * render. A change of its overlays (compare, earlier runs faded) re-renders it.
 */
function skipRender(a: ISeriesCardProps, b: ISeriesCardProps): boolean {
  return (
    a.name === b.name &&
    a.ring === b.ring &&
    a.index === b.index &&
    a.trans === b.trans &&
    // earlier runs drawn or not (a user's choice, not a data tick): shown at
    // once, or a card scrolled away would come back without them
    a.overlays === b.overlays &&
    a.shownLabel === b.shownLabel &&
    outOfView.has(b.ring)
  );
}

/**
 * One series: its name, last value, log-y and smoothing toggles (remembered
 * per series name) and a live chart, with earlier runs as faded overlays.
 */
export const SeriesCard = React.memo(SeriesCardImpl, skipRender);

function SeriesCardImpl(props: ISeriesCardProps): JSX.Element {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<LineChart | null>(null);
  // Out of view, the card's text stays as it was (no DOM change, no style or
  // layout work for the hundreds of cards scrolled away); caught up when shown.
  // in view: reported by the chart's (shared) IntersectionObserver
  const [inView, setInView] = useState(
    typeof IntersectionObserver === 'undefined'
  );
  useEffect(() => {
    if (inView) {
      outOfView.delete(props.ring);
    } else {
      outOfView.add(props.ring);
    }
    return () => {
      outOfView.delete(props.ring);
    };
  }, [inView, props.ring]);
  const shown = useRef({ last: NaN, lastX: NaN, total: 0 });
  if (inView) {
    shown.current = {
      last: props.ring.last,
      lastX: props.ring.lastX,
      total: props.ring.total
    };
  }
  const facts = shown.current;
  const [view, setView] = useState<ISeriesView>(() =>
    loadSeriesView(props.name)
  );
  // layout effects: the chart takes new points in the same commit as the
  // card's text, so both are drawn in one frame (not text, then canvas)
  useLayoutEffect(() => {
    const c = new LineChart({
      series: [{ label: props.name, color: seriesColor(props.index) }],
      height: 120
    });
    chart.current = c;
    c.onVisibilityChange = setInView;
    host.current?.appendChild(c.node);
    return () => {
      c.dispose();
      c.node.remove();
      chart.current = null;
    };
  }, [props.name, props.index]);
  useEffect(() => {
    chart.current?.setLog(view.log);
    chart.current?.setSmoothing(view.smooth ? DEFAULT_SMOOTHING : null);
  }, [view, props.name, props.index]);
  useEffect(() => {
    chart.current?.setOverlays(props.overlays ?? [], props.shownLabel, runs =>
      props.trans.__('%1 (faded)', runs)
    );
  }, [props.overlays, props.shownLabel, props.trans, props.name, props.index]);
  useLayoutEffect(() => {
    // read in place at the next frame in view: no copy here
    chart.current?.setRing(props.ring);
  }, [props.tick, props.ring, props.name, props.index]);
  const toggle = (key: keyof ISeriesView) => {
    const next = { ...view, [key]: !view[key] };
    saveSeriesView(props.name, next);
    setView(next);
  };
  const { trans } = props;
  return (
    <section className="jp-TorchDbg-seriesCard" data-series={props.name}>
      <header className="jp-TorchDbg-seriesHeader">
        <span
          className="jp-TorchDbg-swatch"
          style={{ background: seriesColor(props.index) }}
        />
        <span className="jp-TorchDbg-seriesName" title={props.name}>
          {props.name}
        </span>
        <span className="jp-TorchDbg-seriesValue">
          {formatValue(facts.last)}
        </span>
        {props.headerExtra}
      </header>
      <div className="jp-TorchDbg-chartHost" ref={host} />
      <div className="jp-TorchDbg-seriesBar">
        <footer className="jp-TorchDbg-seriesFooter">
          {trans.__(
            'step %1 · %2 points',
            Number.isFinite(facts.lastX) ? String(facts.lastX) : '–',
            String(facts.total)
          )}
        </footer>
        <span className="jp-TorchDbg-chartToggles">
          <button
            type="button"
            className="jp-TorchDbg-chartToggle"
            data-toggle="log"
            aria-pressed={view.log}
            title={trans.__('Logarithmic y axis (values ≤ 0 are not drawn)')}
            onClick={() => toggle('log')}
          >
            {trans.__('log')}
          </button>
          <button
            type="button"
            className="jp-TorchDbg-chartToggle"
            data-toggle="smooth"
            aria-pressed={view.smooth}
            title={trans.__(
              'Smoothing: exponential moving average, weight %1; the raw line stays faint',
              String(DEFAULT_SMOOTHING)
            )}
            onClick={() => toggle('smooth')}
          >
            {trans.__('smooth')}
          </button>
        </span>
      </div>
    </section>
  );
}
