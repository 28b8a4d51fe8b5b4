import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import type { TorchDbgConnection } from '../../connection/connection';
import { TorchDbgModel } from '../../model/model';
import { IAlertItem } from '../../protocol/messages';
import { ReplayButton, ReplayView } from './replayView';

/** A replay result this fresh (seconds) scrolls itself into view when it arrives. */
const REVEAL_S = 10;

/**
 * The latest gradient alarms (newest first); a step button marks it on the
 * charts. The alert of the step the kernel kept for replay (`replayable`)
 * offers the replay; a replay's own alert shows its result.
 */
export function AlertList(props: {
  alerts: readonly IAlertItem[];
  model: TorchDbgModel;
  trans: TranslationBundle;
  conn?: TorchDbgConnection;
}): JSX.Element | null {
  const { alerts, trans, conn } = props;
  if (!alerts.length) {
    return null;
  }
  const recent = alerts.slice(-20).reverse();
  const kept = props.model.grads.status?.replayable ?? null;
  // One button: on the newest alert of the kept step (not on a replay's result).
  const offer = kept
    ? recent.find(
        a =>
          a.kind !== 'non_finite_replay' &&
          a.kind.startsWith('non_finite') &&
          a.track === kept.track &&
          a.step === kept.step
      )
    : undefined;
  return (
    <ul className="jp-TorchDbg-alerts" aria-label={trans.__('Gradient alarms')}>
      {recent.map(a => (
        <li
          key={a.id}
          className={`jp-TorchDbg-alert jp-mod-${a.severity}`}
          data-kind={a.kind}
        >
          <button
            className="jp-TorchDbg-alertStep"
            title={trans.__('Mark step %1 on the charts', String(a.step))}
            onClick={() => {
              props.model.grads.focusStep = a.step;
            }}
          >
            {trans.__('step %1', String(a.step))}
          </button>
          <span className="jp-TorchDbg-alertText">
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
      ))}
    </ul>
  );
}
