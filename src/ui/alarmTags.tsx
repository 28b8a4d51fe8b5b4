import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

/**
 * The tags of an alarm in a list ordered first to last: "first: likely the cause" on the
 * first one and "latest" on the newest, when the list holds more than one. `scope` is
 * what the list belongs to in the tooltip ("run", "job").
 */
export function AlarmTags(props: {
  isFirst: boolean;
  isLatest: boolean;
  count: number;
  scope: 'run' | 'job';
  trans: TranslationBundle;
}): JSX.Element | null {
  const { isFirst, isLatest, count, scope, trans } = props;
  if (count <= 1) {
    return null;
  }
  return (
    <>
      {isFirst && (
        <span
          className="jp-TorchDbg-alertTag"
          title={
            scope === 'run'
              ? trans.__(
                  'The first alarm of the run: usually the cause of the ones after it'
                )
              : trans.__(
                  'The first alarm of the job: usually the cause of the ones after it'
                )
          }
        >
          {trans.__('first: likely the cause')}
        </span>
      )}
      {isLatest && (
        <span className="jp-TorchDbg-alertTag jp-mod-latest">
          {trans.__('latest')}
        </span>
      )}
    </>
  );
}

/**
 * The row of an alarm list that opens or folds it ("show 12 more alarms",
 * "show fewer"): a link-styled button in its own list item.
 */
export function AlarmListToggle(props: {
  label: string;
  onClick: () => void;
}): JSX.Element {
  return (
    <li className="jp-TorchDbg-alertGap">
      <button
        className="jp-TorchDbg-link jp-TorchDbg-alertMore"
        onClick={props.onClick}
      >
        {props.label}
      </button>
    </li>
  );
}
