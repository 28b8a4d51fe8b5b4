import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { ILocal } from '../../protocol/messages';

/** Locals (or culprits) as name / one-line text rows. */
export function LocalsTable(props: {
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
