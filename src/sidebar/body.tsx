import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { KernelTracker } from '../connection/tracker';
import { ControlPanel } from '../panels/control';
import { ExceptionPanel, IExceptionActions } from '../panels/exception';
import { GradsPanel } from '../panels/grads';
import { MemoryPanel } from '../panels/memory';
import { RecordPanel } from '../panels/record';
import { RunsBar } from '../panels/runs';
import { SeriesPanel } from '../panels/series';
import { useSignalRender } from '../ui/useSignalRender';
import { CapabilityChips } from './capabilityChips';
import { describeState } from './describeState';
import { runAlarms } from './liveCounts';
import { Footer } from './footer';
import { NowStrip } from './nowStrip';
import { RanksSection } from './ranksSection';
import { openSection, Section } from './section';
import { StatusBlock } from './statusBlock';

/** Open the Gradients section and scroll its alarm list (first alarm first) into view. */
function showAlarms(body: HTMLElement | null): void {
  openSection(body, 'grads', () => {
    body
      ?.querySelector('[data-section="grads"] .jp-TorchDbg-alerts')
      ?.scrollIntoView({ block: 'start', behavior: 'smooth' });
  });
}

/** Open the Ranks section and scroll its alarm list (first alarm first) into view. */
function showRankAlarms(body: HTMLElement | null): void {
  openSection(body, 'ranks', () => {
    body
      ?.querySelector('[data-section="ranks"] .jp-TorchDbg-rankAlarms')
      ?.scrollIntoView({ block: 'start', behavior: 'smooth' });
  });
}

/** The current kernel's panel: its state, or every section once connected. */
export function SidebarBody(props: {
  tracker: KernelTracker;
  actions: IExceptionActions;
  trans: TranslationBundle;
}): JSX.Element {
  const { tracker, trans } = props;
  const body = React.useRef<HTMLDivElement>(null);
  useSignalRender(tracker.currentChanged);
  const conn = tracker.current;
  useSignalRender(conn ? conn.model.stateChanged : null);
  useSignalRender(conn ? conn.model.exception.changed : null);
  useSignalRender(conn ? conn.model.grads.changed : null);
  useSignalRender(conn ? conn.model.runs.changed : null);
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
  // the shown run's alarms: those held, or the kernel's count when larger
  const alarms = runAlarms(conn.model, conn.model.runs.shown);
  return (
    <div className="jp-TorchDbg-body" data-state={state.kind} ref={body}>
      <div className="jp-TorchDbg-kernelLine">
        <span className={`jp-TorchDbg-dot jp-TorchDbg-dot-${state.kind}`} />
        <span className="jp-TorchDbg-kernelName" title={tracker.currentLabel}>
          {tracker.currentLabel}
        </span>
      </div>
      {hello && (state.kind === 'connected' || conn.model.died !== null) ? (
        <>
          {state.kind !== 'connected' && (
            <div className="jp-TorchDbg-died" role="status">
              <p className="jp-TorchDbg-stateText">
                {describeState(state, trans)}
              </p>
              <p className="jp-TorchDbg-muted">
                {trans.__(
                  'The kernel died. Below is what it showed last (read only); the next kernel of this notebook hands over its record.'
                )}
              </p>
            </div>
          )}
          <RecordPanel conn={conn} trans={trans} />
          <NowStrip
            model={conn.model}
            trans={trans}
            onShowAlarms={() => showAlarms(body.current)}
            onShowRankAlarms={() => showRankAlarms(body.current)}
          />
          <RunsBar model={conn.model} trans={trans} />
          <CapabilityChips hello={hello} trans={trans} />
          {conn.model.exception.current && (
            <Section
              id="exception"
              title={trans.__('Exception')}
              reopenOn={
                conn.model.exception.current.replay
                  ? undefined
                  : conn.model.exception.current.id
              }
            >
              <ExceptionPanel
                model={conn.model}
                actions={props.actions}
                trans={trans}
              />
            </Section>
          )}
          <RanksSection conn={conn} trans={trans} />
          <Section id="series" title={trans.__('Logged series')}>
            <SeriesPanel model={conn.model} trans={trans} />
          </Section>
          <Section
            id="grads"
            title={trans.__('Gradients')}
            badge={alarms ? String(alarms) : undefined}
            badgeTitle={trans.__('%1 alarms in this run', String(alarms))}
          >
            <GradsPanel model={conn.model} conn={conn} trans={trans} />
          </Section>
          <Section id="control" title={trans.__('Training control')}>
            <ControlPanel conn={conn} trans={trans} />
          </Section>
          <Section id="memory" title={trans.__('Memory')}>
            <MemoryPanel model={conn.model} conn={conn} trans={trans} />
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
