import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { IOom } from '../../protocol/messages';
import { RichText } from '../../ui/richText';
import { formatBytes } from './format';

/** The OOM autopsy: headline, remedies, largest live tensors, memory_summary(). */
export function OomView(props: {
  oom: IOom;
  trans: TranslationBundle;
}): JSX.Element {
  const { oom, trans } = props;
  const [showSummary, setShowSummary] = useState(false);
  return (
    <div className="jp-TorchDbg-oom" data-oom-id={oom.id}>
      <div className="jp-TorchDbg-excTitle">
        {trans.__('Out of memory on %1', oom.device)}
      </div>
      <p className="jp-TorchDbg-headline">
        <RichText text={oom.headline} />
      </p>
      <ol className="jp-TorchDbg-remedies">
        {oom.remedies.map((r, i) => (
          <li key={i} data-kind={r.kind}>
            <strong>{r.title}</strong> <RichText text={r.detail} />
            {r.code && <pre className="jp-TorchDbg-code">{r.code}</pre>}
          </li>
        ))}
      </ol>
      {oom.tensors.length > 0 && (
        <>
          <div className="jp-TorchDbg-chartTitle">
            {trans.__(
              'largest live tensors (%1 of %2, %3)',
              String(oom.tensors.length),
              String(oom.tensors_total),
              formatBytes(oom.tensors_bytes)
            )}
          </div>
          <div className="jp-TorchDbg-tableWrap">
            <table className="jp-TorchDbg-table jp-TorchDbg-oomTensors">
              <tbody>
                {oom.tensors.map((t, i) => (
                  <tr key={i}>
                    <td
                      className="jp-TorchDbg-localName"
                      title={t.also.join(', ')}
                    >
                      {t.name}
                    </td>
                    <td>{`${t.dtype}[${t.shape.join(', ')}]`}</td>
                    <td>{formatBytes(t.nbytes)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
      {oom.summary && (
        <>
          <button
            className="jp-TorchDbg-link"
            onClick={() => setShowSummary(s => !s)}
          >
            {showSummary
              ? trans.__('hide memory_summary()')
              : trans.__('show memory_summary()')}
          </button>
          {showSummary && (
            <pre className="jp-TorchDbg-source">{oom.summary}</pre>
          )}
        </>
      )}
    </div>
  );
}
