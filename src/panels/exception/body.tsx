import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { TorchDbgModel } from '../../model/model';
import { IException, IExceptionFrame, ILocal } from '../../protocol/messages';
import { useSignalRender } from '../../sidebar/hooks';

/** What the exception view can ask the application to do. */
export interface IExceptionActions {
  /** Open the notebook cell (or file) of a frame at its line. Resolves to a note for the user. */
  goToFrame(exc: IException, frame: IExceptionFrame): Promise<string>;
  /** Open a console on the same kernel and run `%debug` there. Resolves to a note. */
  debug(exc: IException): Promise<string>;
  /** Copy the report (Markdown) to the clipboard. */
  copyReport(exc: IException): Promise<void>;
}

/** Render `code` spans of a kernel sentence as <code> text nodes (never HTML). */
export function RichText(props: { text: string }): JSX.Element {
  const parts = props.text.split('`');
  return (
    <>
      {parts.map((p, i) =>
        i % 2 === 1 ? (
          <code key={i}>{p}</code>
        ) : (
          <React.Fragment key={i}>{p}</React.Fragment>
        )
      )}
    </>
  );
}

function LocalsTable(props: {
  locals: ILocal[];
  trans: TranslationBundle;
}): JSX.Element {
  const { locals, trans } = props;
  if (!locals.length) {
    return <p className="jp-TorchDbg-muted">{trans.__('No locals.')}</p>;
  }
  return (
    <div className="jp-TorchDbg-tableWrap">
      <table className="jp-TorchDbg-table jp-TorchDbg-locals">
        <tbody>
          {locals.map((l, i) => (
            <tr key={`${l.name ?? ''}-${i}`} data-kind={l.kind}>
              <td className="jp-TorchDbg-localName">{l.name ?? ''}</td>
              <td className="jp-TorchDbg-localText">{l.text}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function frameLabel(f: IExceptionFrame): string {
  return `${f.file}:${f.lineno} in ${f.function}`;
}

function Frames(props: {
  exc: IException;
  selected: number;
  onSelect: (i: number) => void;
  trans: TranslationBundle;
}): JSX.Element {
  const { exc, selected, trans } = props;
  const [showLib, setShowLib] = useState(false);
  const elidedAfter = new Map(exc.elided.map(e => [e.after, e]));
  const items: JSX.Element[] = [];
  let hidden = 0;
  exc.frames.forEach((f, i) => {
    const visible = f.user || showLib || i === selected;
    if (!visible) {
      hidden++;
    } else {
      items.push(
        <li
          key={i}
          className={`jp-TorchDbg-frame ${f.user ? 'jp-mod-user' : 'jp-mod-library'} ${
            i === selected ? 'jp-mod-selected' : ''
          }`}
        >
          <button
            className="jp-TorchDbg-frameButton"
            onClick={() => props.onSelect(i)}
          >
            <span className="jp-TorchDbg-frameWhere">{frameLabel(f)}</span>
            <span className="jp-TorchDbg-frameLine">{f.line}</span>
          </button>
        </li>
      );
    }
    const gap = elidedAfter.get(i);
    if (gap) {
      items.push(
        <li key={`gap-${i}`} className="jp-TorchDbg-frameGap">
          {gap.reason === 'repeated'
            ? trans.__(
                '… the frame above repeated %1 more times',
                String(gap.count)
              )
            : trans.__('… %1 frames not captured', String(gap.count))}
        </li>
      );
    }
  });
  return (
    <div className="jp-TorchDbg-frames">
      <ol>{items}</ol>
      {(hidden > 0 || showLib) && (
        <button
          className="jp-TorchDbg-link"
          onClick={() => setShowLib(s => !s)}
        >
          {showLib
            ? trans.__('hide library frames')
            : trans.__('show %1 library frames', String(hidden))}
        </button>
      )}
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
      <div className="jp-TorchDbg-excTitle">{d.title}</div>
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
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          onClick={() => model.exception.dismiss()}
        >
          {trans.__('Dismiss')}
        </button>
      </div>
      {note && <div className="jp-TorchDbg-note">{note}</div>}
      <pre className="jp-TorchDbg-excMessage">
        {exc.exception.type}: {exc.exception.message}
        {exc.exception.message_truncated ? ' …' : ''}
      </pre>
      {exc.chain.map((c, i) => (
        <pre key={i} className="jp-TorchDbg-excChain">
          {c.relation === 'cause'
            ? trans.__('caused by ')
            : trans.__('while handling ')}
          {c.type}: {c.message}
        </pre>
      ))}
      <div className="jp-TorchDbg-chartTitle">
        {trans.__('stack (%1 frames)', String(exc.frames_total))}
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
      {frame && (
        <div className="jp-TorchDbg-frameDetail">
          <div className="jp-TorchDbg-chartTitle">
            {trans.__('locals of %1', frame.function)}
            {frame.locals_truncated &&
              trans.__(
                ' (%1 of %2)',
                String(frame.locals.length),
                String(frame.locals_total)
              )}
          </div>
          {frame.source && (
            <pre className="jp-TorchDbg-source">
              {frame.source.lines.map((line, i) => {
                const n = frame.source!.first + i;
                return (
                  <div
                    key={n}
                    className={n === frame.lineno ? 'jp-mod-current' : ''}
                  >
                    {`${String(n).padStart(4)}  ${line}`}
                  </div>
                );
              })}
            </pre>
          )}
          <LocalsTable locals={frame.locals} trans={trans} />
        </div>
      )}
    </div>
  );
}
