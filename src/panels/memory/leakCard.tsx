import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import type { IMemoryGuard, IMemoryLeak } from '../../protocol/generated';
import { RichText } from '../../ui/richText';
import { formatBytes } from './format';

/** Where the limit comes from, in words. */
export function limitSource(
  source: IMemoryLeak['limit_source'],
  trans: TranslationBundle
): string {
  switch (source) {
    case 'cgroup':
      return trans.__("the kernel's cgroup limit");
    case 'host':
      return trans.__("the host's available memory");
    case 'device':
      return trans.__("the device's memory");
    default:
      return trans.__('no known limit');
  }
}

/**
 * Memory growing with the step count: the fitted rate, when the limit is
 * reached at that rate, and the holders the search named (each with its fix).
 */
export function LeakCard(props: {
  leak: IMemoryLeak;
  trans: TranslationBundle;
}): JSX.Element {
  const { leak, trans } = props;
  return (
    <div
      className="jp-TorchDbg-leak"
      data-series={leak.series}
      data-search={leak.search}
      role="status"
    >
      <div className="jp-TorchDbg-excTitle">
        {trans.__('Memory grows with every step')}
      </div>
      <p className="jp-TorchDbg-headline">
        <RichText text={leak.text} />
      </p>
      {leak.holders.length > 0 && (
        <ol className="jp-TorchDbg-leakHolders">
          {leak.holders.map((h, i) => (
            <li key={i} data-kind={h.kind}>
              {!h.text.includes(h.name) && (
                <>
                  <code className="jp-TorchDbg-localName">{h.name}</code>{' '}
                </>
              )}
              <RichText text={h.text} />
              {h.fix && (
                <div className="jp-TorchDbg-leakFix">
                  <RichText text={h.fix} />
                </div>
              )}
            </li>
          ))}
        </ol>
      )}
      {leak.search === 'pending' && (
        <p className="jp-TorchDbg-muted">
          {trans.__('Looking for what holds it (off the training step)…')}
        </p>
      )}
      {leak.search !== 'pending' && leak.holders.length === 0 && (
        <p className="jp-TorchDbg-muted">
          {leak.search_note ??
            trans.__(
              'No holder found in the notebook’s variables: look for tensors kept from each step.'
            )}
        </p>
      )}
      {leak.search !== 'pending' &&
        leak.holders.length > 0 &&
        leak.search_note && (
          <p className="jp-TorchDbg-muted">{leak.search_note}</p>
        )}
    </div>
  );
}

/** The guard's fraction when the user turns it on. */
export const GUARD_DEFAULT = 0.9;

/**
 * The opt-in pause before the memory limit: a checkbox, the limit it reads,
 * and why it paused training when it did.
 */
export function GuardRow(props: {
  guard: IMemoryGuard;
  enabled: boolean;
  why: string;
  onChange: (pauseAt: number | null) => void;
  trans: TranslationBundle;
}): JSX.Element {
  const { guard, enabled, why, onChange, trans } = props;
  const on = guard.pause_at !== null;
  const fraction = Math.round((guard.pause_at ?? GUARD_DEFAULT) * 100);
  return (
    <div className="jp-TorchDbg-guard" data-on={on ? 'true' : 'false'}>
      <label title={why || undefined}>
        <input
          type="checkbox"
          className="jp-TorchDbg-guardToggle"
          checked={on}
          disabled={!enabled}
          onChange={e => onChange(e.target.checked ? GUARD_DEFAULT : null)}
        />{' '}
        {guard.limit === null
          ? trans.__(
              'Pause training at %1% of the memory limit',
              String(fraction)
            )
          : trans.__(
              'Pause training at %1% of %2 (%3)',
              String(fraction),
              formatBytes(guard.limit),
              limitSource(guard.limit_source, trans)
            )}
      </label>
      {guard.tripped && (
        <p className="jp-TorchDbg-note jp-TorchDbg-guardTripped">
          <RichText text={guard.tripped} />
        </p>
      )}
    </div>
  );
}
