import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { TorchDbgModel } from '../../model/model';
import { IAlertItem } from '../../protocol/messages';

/** The latest gradient alarms (newest first); a step button marks it on the charts. */
export function AlertList(props: {
  alerts: readonly IAlertItem[];
  model: TorchDbgModel;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { alerts, trans } = props;
  if (!alerts.length) {
    return null;
  }
  const recent = alerts.slice(-20).reverse();
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
          </span>
        </li>
      ))}
    </ul>
  );
}
