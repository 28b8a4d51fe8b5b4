import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { TorchDbgConnection } from '../connection/connection';
import { describeState, INSTALL_COMMAND } from './describeState';

/** Why the panel shows no data yet, with the Load button when loading can help. */
export function StatusBlock(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
  onLoad: () => void;
}): JSX.Element {
  const { conn, trans } = props;
  const state = conn.model.state;
  const canLoad =
    state.kind === 'not_loaded' || state.kind === 'package_missing';
  return (
    <div className={`jp-TorchDbg-state jp-TorchDbg-state-${state.kind}`}>
      <p className="jp-TorchDbg-stateText">{describeState(state, trans)}</p>
      {state.kind === 'package_missing' && (
        <pre className="jp-TorchDbg-code">{INSTALL_COMMAND}</pre>
      )}
      {canLoad && (
        <button
          className="jp-Button jp-mod-styled jp-mod-accept"
          onClick={props.onLoad}
        >
          {trans.__('Load')}
        </button>
      )}
    </div>
  );
}
