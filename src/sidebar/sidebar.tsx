import type { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import React from 'react';

import { TorchDbgConnection } from '../connection/connection';
import { KernelTracker } from '../connection/tracker';
import { ConnectionState } from '../model/model';
import { IHello } from '../protocol/messages';
import { ControlPanel } from '../panels/control';
import { ExceptionPanel, IExceptionActions } from '../panels/exception';
import { GradsPanel } from '../panels/grads';
import { MemoryPanel } from '../panels/memory';
import { SeriesPanel } from '../panels/series';
import { useSignalRender } from './hooks';

/** The install command shown when the kernel's environment lacks the package. */
export const INSTALL_COMMAND = '%pip install jupyterlab_torchdbg';

/** One sentence for every state: the panel always says why it shows nothing. */
export function describeState(
  state: ConnectionState,
  trans: TranslationBundle
): string {
  switch (state.kind) {
    case 'no_kernel':
      return trans.__(
        'Open a notebook or console with a Python kernel to start debugging.'
      );
    case 'not_python':
      return trans.__(
        'This kernel runs %1; the Torch Debugger needs a Python kernel.',
        state.language
      );
    case 'connecting':
      return trans.__('Connecting to the kernel…');
    case 'busy_waiting':
      return trans.__(
        'The kernel is busy running a cell and cannot answer until it ends (this kernel has no subshells). The panel attaches when the cell finishes.'
      );
    case 'loading':
      return trans.__('Loading jupyterlab_torchdbg in the kernel…');
    case 'not_loaded':
      return trans.__(
        'The kernel side is not loaded. %1 Run %load_ext jupyterlab_torchdbg or click Load.',
        state.reason
      );
    case 'package_missing':
      return trans.__(
        "The kernel's environment has no jupyterlab_torchdbg (%1). Install it there, then click Load:",
        state.detail
      );
    case 'version_mismatch':
      return state.message;
    case 'restarting':
      return trans.__(
        'The kernel is restarting; the panel reattaches when it is ready.'
      );
    case 'dead':
      return trans.__('The kernel died. Restart it to continue.');
    case 'connected':
      return trans.__('Connected.');
  }
}

function CapabilityChips(props: {
  hello: IHello;
  trans: TranslationBundle;
}): JSX.Element {
  const { capabilities: c, package_version } = props.hello;
  const { trans } = props;
  const chips: { label: string; ok: boolean; title: string }[] = [
    {
      label: c.torch.available
        ? trans.__('torch %1', c.torch.version ?? '?')
        : trans.__('no torch'),
      ok: c.torch.available,
      title: c.torch.reason ?? trans.__('torch is available')
    },
    {
      label:
        c.cuda.available === true
          ? trans.__('CUDA ×%1', String(c.cuda.device_count ?? '?'))
          : c.cuda.available === false
            ? trans.__('no CUDA')
            : trans.__('CUDA: not checked'),
      ok: c.cuda.available === true,
      title: c.cuda.reason ?? trans.__('CUDA devices visible')
    },
    {
      label: c.nvml.available ? trans.__('NVML') : trans.__('no NVML'),
      ok: c.nvml.available,
      title: c.nvml.reason ?? trans.__('NVML driver %1', c.nvml.version ?? '')
    },
    {
      label: c.subshells
        ? trans.__('live actions')
        : trans.__('actions wait for cell'),
      ok: c.subshells,
      title: c.subshells
        ? trans.__('The kernel has subshells: actions apply while a cell runs.')
        : trans.__(
            'No kernel subshells (ipykernel < 7): actions wait until the running cell ends.'
          )
    }
  ];
  return (
    <div
      className="jp-TorchDbg-chips"
      title={`jupyterlab_torchdbg ${package_version}`}
    >
      {chips.map(chip => (
        <span
          key={chip.label}
          className={`jp-TorchDbg-chip ${chip.ok ? 'jp-mod-ok' : 'jp-mod-off'}`}
          title={chip.title}
        >
          {chip.label}
        </span>
      ))}
    </div>
  );
}

function StatusBlock(props: {
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

function Footer(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element {
  const m = props.conn.model;
  useSignalRender(m.dataChanged);
  const errors = m.stats
    ? Object.values(m.stats.errors).reduce((a, b) => a + b, 0)
    : 0;
  return (
    <footer className="jp-TorchDbg-footer">
      {props.trans.__(
        'seq %1 · %2 gaps · %3 dropped',
        String(Math.max(0, m.lastSeq)),
        String(m.gaps),
        String(m.dropped)
      )}
      {errors > 0 && (
        <span className="jp-TorchDbg-warn">
          {props.trans.__(' · %1 tool errors (caught)', String(errors))}
        </span>
      )}
    </footer>
  );
}

/** A collapsible section of the sidebar. */
function Section(props: {
  id: string;
  title: string;
  badge?: string;
  open?: boolean;
  children: React.ReactNode;
}): JSX.Element {
  const [open, setOpen] = React.useState(props.open ?? true);
  return (
    <section className="jp-TorchDbg-section" data-section={props.id}>
      <button
        className="jp-TorchDbg-sectionHeader"
        aria-expanded={open}
        onClick={() => setOpen(o => !o)}
      >
        <span className="jp-TorchDbg-caret">{open ? '▾' : '▸'}</span>
        {props.title}
        {props.badge && (
          <span className="jp-TorchDbg-badge">{props.badge}</span>
        )}
      </button>
      {open && <div className="jp-TorchDbg-sectionBody">{props.children}</div>}
    </section>
  );
}

function SidebarBody(props: {
  tracker: KernelTracker;
  actions: IExceptionActions;
  trans: TranslationBundle;
}): JSX.Element {
  const { tracker, trans } = props;
  useSignalRender(tracker.currentChanged);
  const conn = tracker.current;
  useSignalRender(conn ? conn.model.stateChanged : null);
  useSignalRender(conn ? conn.model.exception.changed : null);
  useSignalRender(conn ? conn.model.grads.changed : null);
  if (!conn) {
    return (
      <div className="jp-TorchDbg-body">
        <div className="jp-TorchDbg-state jp-TorchDbg-state-no_kernel">
          <p className="jp-TorchDbg-stateText">
            {describeState({ kind: 'no_kernel' }, trans)}
          </p>
        </div>
      </div>
    );
  }
  const state = conn.model.state;
  const hello = conn.model.hello;
  return (
    <div className="jp-TorchDbg-body" data-state={state.kind}>
      <div className="jp-TorchDbg-kernelLine">
        <span className={`jp-TorchDbg-dot jp-TorchDbg-dot-${state.kind}`} />
        <span className="jp-TorchDbg-kernelName" title={tracker.currentLabel}>
          {tracker.currentLabel}
        </span>
      </div>
      {state.kind === 'connected' && hello ? (
        <>
          <CapabilityChips hello={hello} trans={trans} />
          {conn.model.exception.current && (
            <Section id="exception" title={trans.__('Exception')}>
              <ExceptionPanel
                model={conn.model}
                actions={props.actions}
                trans={trans}
              />
            </Section>
          )}
          <Section id="control" title={trans.__('Training control')}>
            <ControlPanel conn={conn} trans={trans} />
          </Section>
          <Section
            id="grads"
            title={trans.__('Gradients')}
            badge={
              conn.model.grads.alerts.length
                ? String(conn.model.grads.alerts.length)
                : undefined
            }
          >
            <GradsPanel model={conn.model} conn={conn} trans={trans} />
          </Section>
          <Section id="memory" title={trans.__('Memory')}>
            <MemoryPanel model={conn.model} conn={conn} trans={trans} />
          </Section>
          <Section id="series" title={trans.__('Logged series')}>
            <SeriesPanel model={conn.model} trans={trans} />
          </Section>
          <Footer conn={conn} trans={trans} />
        </>
      ) : (
        <StatusBlock
          conn={conn}
          trans={trans}
          onLoad={() => {
            void conn.load().then(ok => {
              if (ok) {
                void conn.connect();
              }
            });
          }}
        />
      )}
    </div>
  );
}

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
