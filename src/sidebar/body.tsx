import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { KernelTracker } from '../connection/tracker';
import { ControlPanel } from '../panels/control';
import { ExceptionPanel, IExceptionActions } from '../panels/exception';
import { GradsPanel } from '../panels/grads';
import { MemoryPanel } from '../panels/memory';
import { SeriesPanel } from '../panels/series';
import { useSignalRender } from '../ui/useSignalRender';
import { CapabilityChips } from './capabilityChips';
import { describeState } from './describeState';
import { Footer } from './footer';
import { Section } from './section';
import { StatusBlock } from './statusBlock';

/** The current kernel's panel: its state, or every section once connected. */
export function SidebarBody(props: {
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
