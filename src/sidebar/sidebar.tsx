import type { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import React from 'react';

import { KernelTracker } from '../connection/tracker';
import { IExceptionActions } from '../panels/exception';
import { SidebarBody } from './body';

export { describeState, INSTALL_COMMAND } from './describeState';

/** The right-sidebar panel. */
export class TorchDbgSidebar extends ReactWidget {
  constructor(options: TorchDbgSidebar.IOptions) {
    super();
    this._tracker = options.tracker;
    this._trans = options.trans;
    this._actions = options.actions;
    this.id = 'jp-torchdbg-sidebar';
    this.addClass('jp-TorchDbg-sidebar');
  }

  render(): JSX.Element {
    return (
      <>
        <header className="jp-TorchDbg-title">
          {this._trans.__('Torch Debugger')}
        </header>
        <SidebarBody
          tracker={this._tracker}
          actions={this._actions}
          trans={this._trans}
        />
      </>
    );
  }

  private _tracker: KernelTracker;
  private _trans: TranslationBundle;
  private _actions: IExceptionActions;
}

export namespace TorchDbgSidebar {
  export interface IOptions {
    tracker: KernelTracker;
    actions: IExceptionActions;
    trans: TranslationBundle;
  }
}
