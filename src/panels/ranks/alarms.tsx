import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import type { IRankAlarm } from '../../protocol/generated';
import { AlarmListToggle, AlarmTags } from '../../ui/alarmTags';
import { HangView } from './hangView';

/** Rank alarms shown before "show all": the first (the root cause) and the latest ones. */
export const SHOWN_RANK_ALARMS = 6;

/** Alarm kinds drawn as errors (the others as warnings). */
const ERROR_KINDS = new Set<IRankAlarm['kind']>([
  'failed',
  'hang',
  'desync',
  'non_finite'
]);

/** The kind of an alarm as a word. */
function kindLabel(kind: IRankAlarm['kind'], trans: TranslationBundle): string {
  switch (kind) {
    case 'desync':
      return trans.__('desync');
    case 'straggler':
      return trans.__('straggler');
    case 'hang':
      return trans.__('hang');
    case 'failed':
      return trans.__('failed');
    case 'lost':
      return trans.__('lost');
    case 'action':
      return trans.__('action missed');
    case 'non_finite':
      return trans.__('non-finite');
    case 'explosion':
      return trans.__('explosion');
    case 'vanishing':
      return trans.__('vanishing');
  }
}

/** The layer line of an alarm: what its layer is, by kind. */
function layerLabel(a: IRankAlarm, trans: TranslationBundle): string {
  const layer = a.layer ?? '';
  switch (a.kind) {
    case 'desync':
      return trans.__('first layer that differs: %1', layer);
    case 'non_finite':
      return trans.__('where: %1', layer);
    default:
      return trans.__('layer: %1', layer);
  }
}

/**
 * The job's rank alarms, oldest first: the first is likely the root cause (a
 * rank that failed makes the others hang), the latest is highlighted. A
 * hang's stack (taken inside the stuck rank) opens on demand.
 */
export function RankAlarms(props: {
  alarms: readonly IRankAlarm[];
  trans: TranslationBundle;
}): JSX.Element | null {
  const { alarms, trans } = props;
  const [all, setAll] = useState(false);
  if (alarms.length === 0) {
    return null;
  }
  const first = alarms[0];
  const latest = alarms[alarms.length - 1];
  const many = alarms.length > SHOWN_RANK_ALARMS;
  const tail =
    all || !many ? alarms.slice(1) : alarms.slice(-(SHOWN_RANK_ALARMS - 1));
  const hidden = alarms.length - 1 - tail.length;
  const item = (a: IRankAlarm) => {
    const classes = [
      'jp-TorchDbg-alert',
      'jp-TorchDbg-rankAlarm',
      ERROR_KINDS.has(a.kind) ? 'jp-mod-error' : 'jp-mod-warning',
      a === first ? 'jp-mod-first' : '',
      a === latest && alarms.length > 1 ? 'jp-mod-latest' : ''
    ];
    return (
      <li
        key={a.id}
        className={classes.filter(Boolean).join(' ')}
        data-kind={a.kind}
        data-rank={a.rank}
        aria-current={a === latest ? 'true' : undefined}
      >
        <span className="jp-TorchDbg-alertText">
          <span className="jp-TorchDbg-rankAlarmHead">
            <AlarmTags
              isFirst={a === first}
              isLatest={a === latest}
              count={alarms.length}
              scope="job"
              trans={trans}
            />
            <span className="jp-TorchDbg-rankAlarmWho">
              {a.step !== null
                ? trans.__(
                    'rank %1 · %2 · step %3',
                    String(a.rank),
                    kindLabel(a.kind, trans),
                    String(a.step)
                  )
                : trans.__(
                    'rank %1 · %2',
                    String(a.rank),
                    kindLabel(a.kind, trans)
                  )}
            </span>
          </span>
          <span className="jp-TorchDbg-alertMessage">{a.message}</span>
          {a.layer && (
            <span className="jp-TorchDbg-alertRemedy jp-TorchDbg-rankAlarmLayer">
              {layerLabel(a, trans)}
            </span>
          )}
          {a.ranks && a.ranks.length > 1 && (
            <span className="jp-TorchDbg-alertRemedy jp-TorchDbg-rankAlarmRanks">
              {trans.__('seen on ranks %1', a.ranks.join(', '))}
            </span>
          )}
          {a.remedy && (
            <span className="jp-TorchDbg-alertRemedy jp-TorchDbg-rankAlarmRemedy">
              {trans.__('Fix: %1', a.remedy)}
            </span>
          )}
          {a.kind === 'hang' && <HangView alarm={a} trans={trans} />}
          {a.stack.length > 0 && <RankStack alarm={a} trans={trans} />}
        </span>
      </li>
    );
  };
  return (
    <ul
      className="jp-TorchDbg-alerts jp-TorchDbg-rankAlarms"
      aria-label={trans.__('Rank alarms')}
    >
      {item(first)}
      {hidden > 0 && (
        <AlarmListToggle
          label={trans.__('show %1 more alarms', String(hidden))}
          onClick={() => setAll(true)}
        />
      )}
      {tail.map(item)}
      {all && many && (
        <AlarmListToggle
          label={trans.__('show fewer')}
          onClick={() => setAll(false)}
        />
      )}
    </ul>
  );
}

/**
 * A stuck rank's stack, as the exception view shows a traceback: the user's
 * frames (listed first by the kernel, `stack_user` of them) open, the
 * library's and the tool's collapsed after them.
 */
function RankStack(props: {
  alarm: IRankAlarm;
  trans: TranslationBundle;
}): JSX.Element {
  const { alarm: a, trans } = props;
  const nUser =
    a.stack_user === undefined
      ? a.stack.length
      : Math.min(a.stack_user, a.stack.length);
  const mine = a.stack.slice(0, nUser);
  const library = a.stack.slice(nUser);
  return (
    <details className="jp-TorchDbg-rankStack">
      <summary>
        {trans._n(
          'stack of rank %2 (%1 frame)',
          'stack of rank %2 (%1 frames)',
          a.stack.length,
          String(a.rank)
        )}
      </summary>
      {mine.length > 0 && (
        <pre className="jp-TorchDbg-rankStackLines jp-mod-user">
          {mine.join('\n')}
        </pre>
      )}
      {library.length > 0 && (
        <details className="jp-TorchDbg-rankStackLibrary">
          <summary>
            {trans._n('%1 library frame', '%1 library frames', library.length)}
          </summary>
          <pre className="jp-TorchDbg-rankStackLines">{library.join('\n')}</pre>
        </details>
      )}
    </details>
  );
}
