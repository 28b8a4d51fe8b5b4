import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { TorchDbgConnection } from '../connection/connection';
import { useLiveTick } from '../charts/live';

/** The stream's health: last seq, gaps, dropped points, caught tool errors. */
export function Footer(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element {
  const m = props.conn.model;
  useLiveTick(m.dataChanged);
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
