import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { TorchDbgModel } from '../../model/model';
import { IException, IExceptionFrame } from '../../protocol/messages';
import { RichText } from '../../ui/richText';
import { useSignalRender } from '../../ui/useSignalRender';
import { IExceptionActions } from './actions';
import { FrameDetail, Frames } from './frames';
import { LocalsTable } from './localsTable';
import type { Superseded } from './model';

/** Dismiss: the exception leaves the panel and is not shown again. */
function DismissButton(props: {
  model: TorchDbgModel;
  trans: TranslationBundle;
}): JSX.Element {
  return (
    <button
      className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
      onClick={() => props.model.exception.dismiss()}
    >
      {props.trans.__('Dismiss')}
    </button>
  );
}

/**
 * An exception that something ran after (a later cell finished without error,
 * or a run started): one line, so it no longer holds the top of the panel
 * through later training, with Show (the full view again) and Dismiss.
 */
function EarlierException(props: {
  model: TorchDbgModel;
  superseded: Superseded;
  trans: TranslationBundle;
}): JSX.Element {
  const { model, superseded, trans } = props;
  const exc = model.exception.current!;
  const where =
    exc.execution_count !== null
      ? trans.__('Earlier error, In [%1]', String(exc.execution_count))
      : trans.__('Earlier error');
  const since =
    superseded === 'run'
      ? trans.__('a run started after it')
      : trans.__('a later cell ran without error');
  const message = exc.exception.message.split('\n')[0];
  return (
    <div
      className="jp-TorchDbg-exception jp-TorchDbg-excEarlier"
      data-category={exc.diagnosis.category}
      data-exception-id={exc.id}
      data-superseded={superseded ?? ''}
    >
      <div className="jp-TorchDbg-excEarlierLine" title={exc.diagnosis.title}>
        {exc.exception.type}: {message}
      </div>
      <div className="jp-TorchDbg-excEarlierWhere">
        {trans.__('%1 · %2', where, since)}
      </div>
      <div className="jp-TorchDbg-controls">
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          onClick={() => model.exception.expand()}
        >
          {trans.__('Show')}
        </button>
        <DismissButton model={model} trans={trans} />
      </div>
    </div>
  );
}

/**
 * What went wrong and what to do: the title, the rank that raised (a worker
 * process of a torch.distributed job), the headline, the fix, the hints and
 * the objects involved.
 */
function Diagnosis(props: {
  exc: IException;
  trans: TranslationBundle;
}): JSX.Element {
  const { exc, trans } = props;
  const d = exc.diagnosis;
  return (
    <>
      <div className="jp-TorchDbg-excTitle">{d.title}</div>
      {exc.rank && (
        <div
          className="jp-TorchDbg-excRank"
          data-rank={exc.rank.rank}
          title={trans.__(
            'The worker process that raised (%1)',
            exc.rank.launcher
          )}
        >
          {trans.__(
            'Rank %1 of %2 · %3 · pid %4',
            String(exc.rank.rank),
            String(exc.rank.world_size),
            exc.rank.host,
            String(exc.rank.pid)
          )}
        </div>
      )}
      <p className="jp-TorchDbg-headline">
        <RichText text={d.headline} />
      </p>
      {d.remedy && (
        <p className="jp-TorchDbg-remedy">
          <strong>{trans.__('Fix: ')}</strong>
          <RichText text={d.remedy} />
        </p>
      )}
      {d.hints.length > 0 && (
        <ul className="jp-TorchDbg-hints">
          {d.hints.map((h, i) => (
            <li key={i}>
              <RichText text={h} />
            </li>
          ))}
        </ul>
      )}
      {d.culprits.length > 0 && (
        <div className="jp-TorchDbg-culprits">
          <div className="jp-TorchDbg-chartTitle">{trans.__('involved')}</div>
          <LocalsTable locals={d.culprits} trans={trans} />
        </div>
      )}
    </>
  );
}

/**
 * What to do with the exception: go to its cell (the selected frame's line),
 * %debug in a console on this kernel (not for another process's or a replaced
 * error), copy the report, dismiss it.
 */
function ExceptionButtons(props: {
  exc: IException;
  frame: IExceptionFrame | undefined;
  model: TorchDbgModel;
  actions: IExceptionActions;
  run: (p: Promise<unknown>) => void;
  trans: TranslationBundle;
}): JSX.Element {
  const { exc, frame, model, actions, run, trans } = props;
  return (
    <div className="jp-TorchDbg-controls">
      <button
        className="jp-Button jp-mod-styled jp-mod-accept jp-TorchDbg-small"
        disabled={!frame}
        onClick={() => frame && run(actions.goToFrame(exc, frame))}
      >
        {trans.__('Go to cell')}
      </button>
      <button
        className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
        disabled={!exc.debuggable}
        title={
          exc.debuggable
            ? trans.__('Open a console on this kernel and run %debug')
            : exc.rank
              ? trans.__(
                  'It was raised in the process of rank %1, not in this kernel: %debug cannot reach it',
                  String(exc.rank.rank)
                )
              : trans.__(
                  'A newer error replaced this one (or references were released)'
                )
        }
        onClick={() => run(actions.debug(exc))}
      >
        {trans.__('Debug')}
      </button>
      <button
        className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
        onClick={() =>
          run(actions.copyReport(exc).then(() => trans.__('Report copied.')))
        }
      >
        {trans.__('Copy report')}
      </button>
      <DismissButton model={model} trans={trans} />
    </div>
  );
}

/** The exception view: diagnosis first, then the stack with each frame's locals. */
export function ExceptionPanel(props: {
  model: TorchDbgModel;
  actions: IExceptionActions;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { model, actions, trans } = props;
  useSignalRender(model.exception.changed);
  const exc = model.exception.current;
  const note = model.exception.note;
  const setNote = (n: string) => {
    model.exception.note = n;
  };
  if (!exc) {
    return null;
  }
  const superseded = model.exception.superseded;
  if (superseded) {
    return (
      <EarlierException model={model} superseded={superseded} trans={trans} />
    );
  }
  const d = exc.diagnosis;
  const selected = model.exception.frame;
  const frame = exc.frames[selected];
  const run = (p: Promise<unknown>) =>
    p.then(
      r => setNote(typeof r === 'string' ? r : ''),
      e => setNote((e as Error).message)
    );
  return (
    <div
      className="jp-TorchDbg-exception"
      data-category={d.category}
      data-exception-id={exc.id}
    >
      <Diagnosis exc={exc} trans={trans} />
      <ExceptionButtons
        exc={exc}
        frame={frame}
        model={model}
        actions={actions}
        run={run}
        trans={trans}
      />
      {note && <div className="jp-TorchDbg-note">{note}</div>}
      {exc.unwrapped ? (
        <Unwrapped exc={exc} trans={trans} />
      ) : (
        <pre className="jp-TorchDbg-excMessage">
          {exc.exception.type}: {exc.exception.message}
          {exc.exception.message_truncated ? ' …' : ''}
        </pre>
      )}
      {exc.chain.map((c, i) => (
        <pre key={i} className="jp-TorchDbg-excChain">
          {c.relation === 'cause'
            ? trans.__('caused by ')
            : trans.__('while handling ')}
          {c.type}: {c.message}
        </pre>
      ))}
      <div className="jp-TorchDbg-chartTitle">
        {trans._n('stack (%1 frame)', 'stack (%1 frames)', exc.frames_total)}
        <span className="jp-TorchDbg-frameNav">
          <button
            className="jp-TorchDbg-link"
            title={trans.__('Up (outer frame), like pdb u')}
            onClick={() => (model.exception.frame = selected - 1)}
            disabled={selected <= 0}
          >
            ↑ {trans.__('up')}
          </button>
          <button
            className="jp-TorchDbg-link"
            title={trans.__('Down (inner frame), like pdb d')}
            onClick={() => (model.exception.frame = selected + 1)}
            disabled={selected >= exc.frames.length - 1}
          >
            ↓ {trans.__('down')}
          </button>
        </span>
      </div>
      <Frames
        exc={exc}
        selected={selected}
        onSelect={i => (model.exception.frame = i)}
        trans={trans}
      />
      {frame && <FrameDetail frame={frame} trans={trans} />}
    </div>
  );
}

/** A sample index as the kernel sent it (an int, a string, a list, `{type}`). */
export function formatIndex(value: unknown): string {
  if (Array.isArray(value)) {
    return `(${value.map(formatIndex).join(', ')})`;
  }
  if (value !== null && typeof value === 'object') {
    const type = (value as { type?: unknown }).type;
    return `(${typeof type === 'string' ? type : '?'})`;
  }
  return typeof value === 'string' ? JSON.stringify(value) : String(value);
}

/**
 * A DataLoader's dataset error: the original error first, where it ran and
 * which sample, then torch's own message (the worker's traceback as text) on
 * demand.
 */
function Unwrapped(props: {
  exc: IException;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { exc, trans } = props;
  const u = exc.unwrapped;
  if (!u) {
    return null;
  }
  const sample = u.index_known
    ? trans.__('sample index %1', formatIndex(u.index))
    : trans.__('sample not known');
  return (
    <div className="jp-TorchDbg-unwrapped">
      <div className="jp-TorchDbg-excOrigin" data-index={String(u.index_known)}>
        {trans.__('in %1 · %2', u.where, sample)}
        {u.batch && u.batch.length > 1
          ? trans.__(' · batch %1', formatIndex(u.batch))
          : ''}
      </div>
      <pre className="jp-TorchDbg-excMessage">
        {u.exception.type}: {u.exception.message}
        {u.exception.message_truncated ? ' …' : ''}
      </pre>
      {u.why_unknown && (
        <div className="jp-TorchDbg-note">
          {trans.__('The sample is not known: %1.', u.why_unknown)}
        </div>
      )}
      {exc.exception.message !== u.exception.message && (
        <details className="jp-TorchDbg-excRaw">
          <summary>
            {trans.__('as torch raised it here (%1)', exc.exception.type)}
          </summary>
          <pre className="jp-TorchDbg-excMessage">
            {exc.exception.type}: {exc.exception.message}
            {exc.exception.message_truncated ? ' …' : ''}
          </pre>
        </details>
      )}
    </div>
  );
}
