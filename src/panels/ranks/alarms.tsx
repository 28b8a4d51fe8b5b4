import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import type { IRankAlarm } from '../../protocol/generated';
import { AlarmTags } from '../../ui/alarmTags';

/** Rank alarms shown before "show all": the first (the root cause) and the latest ones. */
export const SHOWN_RANK_ALARMS = 6;

/** Alarm kinds drawn as errors (the others as warnings). */
const ERROR_KINDS = new Set<IRankAlarm['kind']>(['failed', 'hang', 'desync']);

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
            <span className="jp-TorchDbg-alertRemedy">
              {trans.__('first layer that differs: %1', a.layer)}
            </span>
          )}
          {a.stack.length > 0 && (
            <details className="jp-TorchDbg-rankStack">
              <summary>
                {trans._n(
                  'stack of rank %2 (%1 frame)',
                  'stack of rank %2 (%1 frames)',
                  a.stack.length,
                  String(a.rank)
                )}
              </summary>
              <pre className="jp-TorchDbg-rankStackLines">
                {a.stack.join('\n')}
              </pre>
            </details>
          )}
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
        <li className="jp-TorchDbg-alertGap">
          <button
            className="jp-TorchDbg-link jp-TorchDbg-alertMore"
            onClick={() => setAll(true)}
          >
            {trans.__('show %1 more alarms', String(hidden))}
          </button>
        </li>
      )}
      {tail.map(item)}
      {all && many && (
        <li className="jp-TorchDbg-alertGap">
          <button
            className="jp-TorchDbg-link jp-TorchDbg-alertMore"
            onClick={() => setAll(false)}
          >
            {trans.__('show fewer')}
          </button>
        </li>
      )}
    </ul>
  );
}
