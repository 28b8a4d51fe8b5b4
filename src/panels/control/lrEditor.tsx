import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useState } from 'react';

import { TorchDbgConnection } from '../../connection/connection';
import { availability } from '../../model/availability';
import type { IControlTarget } from '../../protocol/generated';
import { wireNumber } from '../../protocol/messages';
import type { ControlAct } from './sendControl';
import { formatLr, parseLr, without } from './lr';

/**
 * The learning rate of each param group of the picked optimizer, as the
 * optimizer reports it, editable (Enter sets it at the next step), with
 * LR ×0.5 and Reset LR for that optimizer. For kernels that report their
 * optimizers (`targets`).
 */
export function LrEditor(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
  act: ControlAct;
  setNote: (note: string) => void;
  /** Render the panel now (after picking another optimizer). */
  refresh: () => void;
}): JSX.Element {
  const { conn, trans, act, setNote, refresh } = props;
  const control = conn.model.control;
  // what the user is typing per `key/group`; the kernel's value otherwise
  const [drafts, setDrafts] = useState<Record<string, string>>({});
  const idle = control.idle || control.state === null;
  const target = control.target;
  const byHand = target?.by_hand ?? false;
  const can = availability(conn.model, trans);
  const byHandWhy = trans.__(
    'A loop without torch.optim: the learning rate is in your code.'
  );
  const lrBlocked = can.setLr.why;
  const changed = target?.groups.filter(g => g.changed) ?? [];

  const setLr = (t: IControlTarget, group: number) => {
    const key = `${t.key}/${group}`;
    const lr = parseLr(drafts[key] ?? '');
    if (lr === null) {
      return;
    }
    act('set_lr', { lr, optimizer: t.key, group }, error => {
      if (!error) {
        setNote(
          trans.__('lr %1 set: it applies at the next step.', formatLr(lr))
        );
        setDrafts(d => without(d, key));
      }
    });
  };

  return (
    <div className="jp-TorchDbg-lr" title={lrBlocked || undefined}>
      {control.targets.length > 1 && (
        <label className="jp-TorchDbg-lrTargetLabel">
          {trans.__('optimizer')}{' '}
          <select
            className="jp-TorchDbg-lrTarget"
            value={target?.key ?? ''}
            onChange={e => {
              control.pickTarget(e.currentTarget.value);
              // now, not at the signal's next frame (the select would snap back)
              refresh();
            }}
          >
            {control.targets.map(t => (
              <option key={t.key} value={t.key}>
                {t.by_hand
                  ? trans.__('%1 (by hand)', t.name)
                  : t.stepping
                    ? t.name
                    : trans.__('%1 (not stepping)', t.name)}
              </option>
            ))}
          </select>
        </label>
      )}
      {target &&
        !byHand &&
        target.groups.map(g => {
          const key = `${target.key}/${g.index}`;
          const current = formatLr(wireNumber(g.lr));
          const draft = drafts[key];
          const value = draft ?? (g.lr === null ? '' : current);
          const valid = parseLr(value) !== null;
          return (
            <div className="jp-TorchDbg-lrRow" key={key} data-group={g.index}>
              <label className="jp-TorchDbg-lrLabel">
                {target.groups.length > 1
                  ? trans.__('lr group %1', String(g.index))
                  : trans.__('lr')}
              </label>
              <input
                className="jp-TorchDbg-lrInput"
                type="text"
                inputMode="decimal"
                aria-label={trans.__(
                  'learning rate of %1, group %2',
                  target.name,
                  String(g.index)
                )}
                data-lr={g.lr === null ? '' : current}
                value={value}
                disabled={!!lrBlocked}
                title={lrBlocked || trans.__('Enter sets it at the next step')}
                aria-invalid={draft !== undefined && !valid}
                onChange={e => {
                  const text = e.currentTarget.value;
                  setDrafts(d => ({ ...d, [key]: text }));
                }}
                onKeyDown={e => {
                  if (e.key === 'Enter') {
                    setLr(target, g.index);
                  } else if (e.key === 'Escape') {
                    setDrafts(d => without(d, key));
                  }
                }}
              />
              <button
                className="jp-Button jp-mod-styled jp-mod-accept jp-TorchDbg-small jp-TorchDbg-lrSet"
                disabled={!!lrBlocked || draft === undefined || !valid}
                title={lrBlocked || undefined}
                onClick={() => setLr(target, g.index)}
              >
                {trans.__('Set')}
              </button>
            </div>
          );
        })}
      <div className="jp-TorchDbg-controls">
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small jp-TorchDbg-lrHalve"
          disabled={!target || !can.scaleLr.enabled}
          title={
            can.scaleLr.why ||
            trans.__(
              'Halve the learning rate of %1 from its next step',
              target?.name ?? ''
            )
          }
          onClick={() =>
            target && act('scale_lr', { factor: 0.5, optimizer: target.key })
          }
        >
          {trans.__('LR ×0.5')}
        </button>
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small jp-TorchDbg-lrReset"
          disabled={!target || !can.resetLr.enabled}
          title={
            can.resetLr.why ||
            (idle
              ? trans.__(
                  'Restore the learning rate from before the panel’s first change, now (nothing is training): %1',
                  changed
                    .map(g => formatLr(wireNumber(g.initial_lr)))
                    .join(', ')
                )
              : trans.__(
                  'Restore the learning rate from before the panel’s first change: %1',
                  changed
                    .map(g => formatLr(wireNumber(g.initial_lr)))
                    .join(', ')
                ))
          }
          onClick={() => target && act('reset_lr', { optimizer: target.key })}
        >
          {trans.__('Reset LR')}
        </button>
      </div>
      {target && byHand && <div className="jp-TorchDbg-note">{byHandWhy}</div>}
    </div>
  );
}
