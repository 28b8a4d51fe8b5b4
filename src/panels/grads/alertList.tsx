import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import type { TorchDbgConnection } from '../../connection/connection';
import { TorchDbgModel } from '../../model/model';
import { IAlertItem } from '../../protocol/messages';
import { AlarmListToggle, AlarmTags } from '../../ui/alarmTags';
import { useSignalRender } from '../../ui/useSignalRender';
import { ReplayButton, ReplayView } from './replayView';

/** A replay result this fresh (seconds) scrolls itself into view when it arrives. */
const REVEAL_S = 10;

/** Alarms shown before "show all": the first one and the latest ones. */
export const SHOWN_ALARMS = 8;

/**
 * Alarms in training order: by run, then step, then the time raised. (Time alone is
 * not enough: the explosion alarm of step 5 can be raised after the non-finite
 * one of step 17, which is its consequence.)
 */
export function trainingOrder(alerts: readonly IAlertItem[]): IAlertItem[] {
  return [...alerts].sort(
    (a, b) => (a.run ?? 0) - (b.run ?? 0) || a.step - b.step || a.time - b.time
  );
}

/**
 * Which alarms to show, in time order: all of them when `all` or when they are
 * few; else the first (the root cause) and the latest `SHOWN_ALARMS - 1`, with the
 * number hidden between them.
 */
export function visibleAlarms(
  alerts: readonly IAlertItem[],
  all: boolean
): { shown: IAlertItem[]; hidden: number } {
  if (all || alerts.length <= SHOWN_ALARMS) {
    return { shown: [...alerts], hidden: 0 };
  }
  const tail = alerts.slice(-(SHOWN_ALARMS - 1));
  return {
    shown: [alerts[0], ...tail],
    hidden: alerts.length - 1 - tail.length
  };
}

/**
 * The run's gradient alarms in training order (step by step): the first alarm
 * is usually the root cause (what followed is its consequence), the latest is
 * highlighted. Each text
 * is shown whole (wrapped). Clicking an alarm marks its step on the charts below;
 * the alert of the step the kernel kept for replay (`replayable`) offers the
 * replay; a replay's own alert shows its result.
 */
export function AlertList(props: {
  alerts: readonly IAlertItem[];
  model: TorchDbgModel;
  trans: TranslationBundle;
  conn?: TorchDbgConnection;
}): JSX.Element | null {
  const { alerts, trans, conn, model } = props;
  useSignalRender(model.grads.changed);
  const [all, setAll] = useState(false);
  if (!alerts.length) {
    return null;
  }
  const ordered = trainingOrder(alerts);
  const { shown, hidden } = visibleAlarms(ordered, all);
  const first = ordered[0];
  const latest = ordered[ordered.length - 1];
  const marked = model.grads.focusStep;
  const kept = model.grads.status?.replayable ?? null;
  // One button: on the newest alert of the kept step (not on a replay's result).
  const offer = kept
    ? [...ordered]
        .reverse()
        .find(
          a =>
            a.kind !== 'non_finite_replay' &&
            a.kind.startsWith('non_finite') &&
            a.track === kept.track &&
            a.step === kept.step
        )
    : undefined;
  const mark = (a: IAlertItem) => {
    model.grads.focusStep = marked === a.step ? null : a.step;
  };
  const item = (a: IAlertItem) => {
    const classes = [
      'jp-TorchDbg-alert',
      `jp-mod-${a.severity}`,
      a === first ? 'jp-mod-first' : '',
      a === latest && ordered.length > 1 ? 'jp-mod-latest' : '',
      marked === a.step ? 'jp-mod-marked' : ''
    ];
    return (
      <li
        key={a.id}
        className={classes.filter(Boolean).join(' ')}
        data-kind={a.kind}
        data-step={a.step}
        aria-current={a === latest ? 'true' : undefined}
        onClick={e => {
          // a click on the text marks the step; buttons inside do their own thing
          if (!(e.target as HTMLElement).closest('button, a, pre')) {
            mark(a);
          }
        }}
      >
        <button
          className="jp-TorchDbg-alertStep"
          aria-pressed={marked === a.step}
          title={trans.__('Mark step %1 on the charts', String(a.step))}
          onClick={() => mark(a)}
        >
          {trans.__('step %1', String(a.step))}
        </button>
        <span className="jp-TorchDbg-alertText">
          <AlarmTags
            isFirst={a === first}
            isLatest={a === latest}
            count={ordered.length}
            scope="run"
            trans={trans}
          />
          <span className="jp-TorchDbg-alertMessage">{a.message}</span>
          <span className="jp-TorchDbg-alertRemedy">{a.remedy}</span>
          {a.replay && (
            <ReplayView
              result={a.replay}
              trans={trans}
              reveal={Date.now() / 1000 - a.time < REVEAL_S}
            />
          )}
          {conn && a === offer && (
            <ReplayButton conn={conn} track={a.track} trans={trans} />
          )}
        </span>
      </li>
    );
  };
  return (
    <ul className="jp-TorchDbg-alerts" aria-label={trans.__('Gradient alarms')}>
      {shown.slice(0, 1).map(item)}
      {hidden > 0 && (
        <AlarmListToggle
          label={trans.__('show %1 more alarms', String(hidden))}
          onClick={() => setAll(true)}
        />
      )}
      {shown.slice(1).map(item)}
      {all && ordered.length > SHOWN_ALARMS && (
        <AlarmListToggle
          label={trans.__('show fewer')}
          onClick={() => setAll(false)}
        />
      )}
    </ul>
  );
}
