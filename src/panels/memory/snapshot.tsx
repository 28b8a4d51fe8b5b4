import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import {
  IAllocationSite,
  IMemorySnapshotSummary
} from '../../protocol/messages';
import { formatBytes } from './format';

/** The command that turns a snapshot file into an HTML page (PyTorch's own viewer). */
export function vizCommand(file: string): string {
  const page = `${file.replace(/\.pickle$/, '')}.html`;
  return `python -m torch.cuda._memory_viz trace_plot ${file} -o ${page}`;
}

/** `file:line` of a site (the kernel sends the last two path components). */
export function siteWhere(s: IAllocationSite): string {
  return `${s.file}:${s.line}`;
}

function SiteTable(props: {
  sites: IAllocationSite[];
  trans: TranslationBundle;
}): JSX.Element {
  const { sites, trans } = props;
  if (!sites.length) {
    return (
      <p className="jp-TorchDbg-muted">
        {trans.__('No allocation with a Python stack in this list.')}
      </p>
    );
  }
  return (
    <div className="jp-TorchDbg-tableWrap">
      <table className="jp-TorchDbg-table jp-TorchDbg-sites">
        <thead>
          <tr>
            <th scope="col">{trans.__('site')}</th>
            <th scope="col">{trans.__('bytes')}</th>
            <th scope="col">{trans.__('count')}</th>
          </tr>
        </thead>
        <tbody>
          {sites.map((s, i) => (
            <tr key={i}>
              <td
                className="jp-TorchDbg-site"
                title={`${siteWhere(s)} ${s.function}`}
              >
                <span className="jp-TorchDbg-siteWhere">{siteWhere(s)}</span>{' '}
                <span className="jp-TorchDbg-siteFunction">{s.function}</span>
              </td>
              <td className="jp-TorchDbg-num">{formatBytes(s.bytes)}</td>
              <td className="jp-TorchDbg-num">{s.count}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/**
 * The last memory-history recording: the snapshot file, how to open it, and the
 * top allocation sites (all allocations while recording, or those still live at
 * the stop). Every kernel string is a React text node.
 */
export function SnapshotSummary(props: {
  snap: IMemorySnapshotSummary;
  trans: TranslationBundle;
}): JSX.Element {
  const { snap, trans } = props;
  const [which, setWhich] = useState<'top' | 'live'>('top');
  const sites = which === 'top' ? snap.top_sites : snap.live_sites;
  const tab = (key: 'top' | 'live', label: string, n: number) => (
    <button
      className="jp-TorchDbg-link jp-TorchDbg-siteTab"
      aria-pressed={which === key}
      onClick={() => setWhich(key)}
    >
      {trans.__('%1 (%2)', label, String(n))}
    </button>
  );
  return (
    <div className="jp-TorchDbg-snapshot" data-file={snap.file}>
      <div className="jp-TorchDbg-chartTitle">
        {trans.__('Memory history snapshot')}
      </div>
      <div className="jp-TorchDbg-snapshotFile">
        <code>{snap.file}</code>
        <span className="jp-TorchDbg-muted">
          {trans.__(
            '%1 · %2 events · %3 OOM',
            formatBytes(snap.bytes),
            String(snap.entries),
            String(snap.oom_events)
          )}
        </span>
      </div>
      <div
        className="jp-TorchDbg-siteTabs"
        role="group"
        aria-label={trans.__('allocation sites')}
      >
        {tab(
          'top',
          trans.__('allocated while recording'),
          snap.top_sites.length
        )}
        {tab('live', trans.__('still live at stop'), snap.live_sites.length)}
      </div>
      <SiteTable sites={sites} trans={trans} />
      <p className="jp-TorchDbg-muted jp-TorchDbg-snapshotHowto">
        {trans.__(
          "The file is in the kernel's working directory. Open it in PyTorch's memory viewer (drag it onto the memory_viz page), or make an HTML page of it:"
        )}
      </p>
      <pre className="jp-TorchDbg-code jp-TorchDbg-snapshotCommand">
        {vizCommand(snap.file)}
      </pre>
    </div>
  );
}
