import type { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import React from 'react';

import { KernelTracker } from './connection/tracker';
import { useSignalRender } from './ui/useSignalRender';

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
  if (!conn || conn.model.state.kind !== 'connected') {
    return null;
  }
  const c = conn.model.control.state;
  const parts: string[] = [];
  if (c?.paused && c.paused_at !== null) {
    parts.push(trans.__('paused at step %1', String(c.paused_at)));
  }
  if (c?.clip !== null && c?.clip !== undefined) {
    parts.push(trans.__('clip %1', String(c.clip)));
  }
  if (c?.lr_scale !== null && c?.lr_scale !== undefined) {
    parts.push(trans.__('LR ×%1', String(c.lr_scale)));
  }
  const alerts = conn.model.grads.alerts.length;
  if (alerts) {
    parts.push(trans.__('%1 alarms', String(alerts)));
  }
  return (
    <span
      className="jp-TorchDbg-status"
      data-paused={c?.paused ? 'true' : 'false'}
    >
      {trans.__('Torch')}
      {parts.length ? `: ${parts.join(' · ')}` : ''}
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
