import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import type { IActivations } from '../../protocol/generated';
import { RichText } from '../../ui/richText';
import { formatBytes } from './format';

/**
 * Where activation memory goes: the measurement's verdict (the largest batch
 * that fits), then the modules that saved the most for backward, each with a
 * bar of its share.
 */
export function ActivationsView(props: {
  report: IActivations;
  trans: TranslationBundle;
}): JSX.Element {
  const { report, trans } = props;
  const top = report.modules.length ? (report.modules[0].bytes ?? 0) : 0;
  return (
    <div className="jp-TorchDbg-activations" data-state={report.state}>
      <div className="jp-TorchDbg-chartTitle">
        {trans.__('saved for backward, by module')}
      </div>
      <p className={report.state === 'failed' ? 'jp-TorchDbg-note' : ''}>
        <RichText text={report.text} />
      </p>
      {report.modules.length > 0 && (
        <div className="jp-TorchDbg-tableWrap">
          <table className="jp-TorchDbg-table jp-TorchDbg-actTable">
            <tbody>
              {report.modules.map(m => (
                <tr key={m.name}>
                  <td className="jp-TorchDbg-localName" title={m.name}>
                    {m.name || trans.__('(model)')}
                  </td>
                  <td className="jp-TorchDbg-actBytes">
                    {formatBytes(m.bytes)}
                  </td>
                  <td className="jp-TorchDbg-actBarCell">
                    <span
                      className="jp-TorchDbg-actBar"
                      style={{
                        width: `${top > 0 ? Math.max(2, (100 * (m.bytes ?? 0)) / top) : 0}%`
                      }}
                    />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
