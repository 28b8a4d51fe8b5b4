import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { IException, IExceptionFrame } from '../../protocol/messages';
import { LocalsTable } from './localsTable';

function frameLabel(f: IExceptionFrame): string {
  return `${f.file}:${f.lineno} in ${f.function}`;
}

/** The stack: user frames, library frames on demand, elided runs marked. */
export function Frames(props: {
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
    if (f.process && f.process !== exc.frames[i - 1]?.process) {
      items.push(
        <li key={`process-${i}`} className="jp-TorchDbg-frameProcess">
          {trans.__('in %1 (from its traceback text):', f.process)}
        </li>
      );
    }
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

/**
 * The selected frame: its source around the line, and its locals (none for a
 * frame of another process, which came as traceback text).
 */
export function FrameDetail(props: {
  frame: IExceptionFrame;
  trans: TranslationBundle;
}): JSX.Element {
  const { frame, trans } = props;
  return (
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
      {frame.process ? (
        <div className="jp-TorchDbg-frameProcessNote">
          {trans.__(
            'This frame ran in %1: its locals are not available here.',
            frame.process
          )}
        </div>
      ) : (
        <LocalsTable locals={frame.locals} trans={trans} />
      )}
    </div>
  );
}
