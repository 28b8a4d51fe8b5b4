import type { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import React from 'react';

import { KernelTracker } from './connection/tracker';
import { describeState } from './sidebar/describeState';
import { useLiveTick } from './charts/live';
import { statusLine } from './statusLine';
import { useSignalRender } from './ui/useSignalRender';

/** A short word for each non-connected state (the full sentence is the tooltip). */
function shortState(kind: string, trans: TranslationBundle): string {
  switch (kind) {
    case 'connecting':
    case 'loading':
      return trans.__('connecting…');
    case 'busy_waiting':
      return trans.__('waiting for the cell');
    case 'not_loaded':
      return trans.__('not loaded');
    case 'package_missing':
      return trans.__('not installed');
    case 'version_mismatch':
      return trans.__('version mismatch');
    case 'restarting':
      return trans.__('restarting');
    case 'dead':
      return trans.__('kernel dead');
    default:
      return trans.__('off');
  }
}

/**
 * "Torch: step 120 · 2 alarms", "Torch: not training", "Torch: paused at step 40 · clip 1"…
 * (never the word "Idle": Galata and users read the kernel's "Idle" in the same bar)
 * in JupyterLab's own status text style (aligned with the other items).
 */
function StatusText(props: {
  tracker: KernelTracker;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { tracker, trans } = props;
  useSignalRender(tracker.currentChanged);
  const conn = tracker.current;
  useSignalRender(conn ? conn.model.stateChanged : null);
  useSignalRender(conn ? conn.model.control.changed : null);
  useSignalRender(conn ? conn.model.grads.changed : null);
  useSignalRender(conn ? conn.model.runs.changed : null);
  useSignalRender(conn ? conn.model.ranks.changed : null);
  // the step and the alarms follow the stream (on the panel's shared live clock)
  useLiveTick(conn ? conn.model.dataChanged : null);
  if (!conn || conn.model.state.kind === 'no_kernel') {
    return null;
  }
  const state = conn.model.state;
  if (state.kind !== 'connected') {
    return (
      <span
        className="jp-TorchDbg-status jp-StatusBar-TextItem"
        data-state={state.kind}
        title={describeState(state, trans)}
      >
        {trans.__('Torch: %1', shortState(state.kind, trans))}
      </span>
    );
  }
  const c = conn.model.control.state;
  const { text, idle } = statusLine(conn.model, trans);
  return (
    <span
      className="jp-TorchDbg-status jp-StatusBar-TextItem"
      data-paused={c?.paused ? 'true' : 'false'}
      data-idle={idle ? 'true' : 'false'}
      title={
        idle
          ? trans.__(
              'Torch Debugger: no training step ran in the last seconds. Click to open the panel.'
            )
          : trans.__('Torch Debugger: click to open the panel')
      }
    >
      {text}
    </span>
  );
}

/** Status bar item: clip level, pause, LR scale and alarm count of the current kernel. */
export class TorchDbgStatus extends ReactWidget {
  constructor(private _options: TorchDbgStatus.IOptions) {
    super();
    this.addClass('jp-mod-highlighted');
    this.node.title = _options.trans.__(
      'Torch Debugger: click to open the panel'
    );
    this.node.addEventListener('click', () => _options.onClick());
  }

  render(): JSX.Element {
    return (
      <StatusText tracker={this._options.tracker} trans={this._options.trans} />
    );
  }
}

export namespace TorchDbgStatus {
  export interface IOptions {
    tracker: KernelTracker;
    trans: TranslationBundle;
    onClick: () => void;
  }
}
