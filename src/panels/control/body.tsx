import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect, useRef, useState } from 'react';

import { TorchDbgConnection } from '../../connection/connection';
import {
  availability,
  rankJobRunning,
  rankJobWhy
} from '../../model/availability';
import { openSection } from '../../sidebar/section';
import type { IControlTarget } from '../../protocol/generated';
import { ActionName, IActionArgs, wireNumber } from '../../protocol/messages';
import { useSignalRender } from '../../ui/useSignalRender';
import { sendControl } from './sendControl';

/** A learning rate as typed and read: short, exact enough, never rounded to 0. */
export function formatLr(v: number): string {
  if (!Number.isFinite(v)) {
    return String(v);
  }
  return String(Number(v.toPrecision(6)));
}

/** The largest learning rate the kernel accepts (`set_lr` in the schema). */
export const MAX_LR = 1e6;

/** A typed learning rate, or null unless a finite number > 0 and ≤ MAX_LR. */
export function parseLr(text: string): number | null {
  const v = Number(text.trim());
  return text.trim() !== '' && Number.isFinite(v) && v > 0 && v <= MAX_LR
    ? v
    : null;
}

/**
 * Whether a multi-process job is running on this kernel; re-renders only when
 * that changes (the ranks model changes up to 10 times a second).
 */
function useRankJob(conn: TorchDbgConnection): boolean {
  const ranks = conn.model.ranks;
  const [running, setRunning] = useState(() => rankJobRunning(conn.model));
  useEffect(() => {
    const update = () => setRunning(rankJobRunning(conn.model));
    update();
    ranks.changed.connect(update);
    return () => {
      ranks.changed.disconnect(update);
    };
  }, [conn, ranks]);
  return running;
}

/** `drafts` less one key. */
function without(
  drafts: Record<string, string>,
  key: string
): Record<string, string> {
  const out = { ...drafts };
  delete out[key];
  return out;
}

/**
 * Clip, pause / resume / single step and the learning rate of the running
 * loop. Everything shown is what the kernel reports (its `control` message):
 * the LR of each param group is the optimizer's own, read at the step.
 */
export function ControlPanel(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element {
  const { conn, trans } = props;
  const control = conn.model.control;
  useSignalRender(control.changed);
  const rankJob = useRankJob(conn);
  const root = useRef<HTMLDivElement>(null);
  const [maxNorm, setMaxNorm] = useState('1.0');
  const [note, setNote] = useState('');
  // what the user is typing per `key/group`; the kernel's value otherwise
  const [drafts, setDrafts] = useState<Record<string, string>>({});
  const [, rerender] = useState(0);
  const state = control.state;
  const truthful = state?.targets !== undefined;
  // no state yet (torch not imported, or before the first message): nothing to act on
  const idle = control.idle || state === null;
  const running = control.running;
  const target = control.target;
  const byHand = target?.by_hand ?? false;
  // what can run now: the same answer the palette's commands get
  const can = availability(conn.model, trans);
  const act = <K extends ActionName>(
    action: K,
    args: IActionArgs[K],
    done?: (error: string) => void
  ) => {
    setNote('');
    void sendControl(conn, action, args).then(error => {
      setNote(error);
      done?.(error);
    });
  };
  const clipValue = Number(maxNorm);
  const clipValid = Number.isFinite(clipValue) && clipValue > 0;
  const byHandWhy = trans.__(
    'A loop without torch.optim: the learning rate is in your code.'
  );
  const lrBlocked = can.setLr.why;
  const changed = target?.groups.filter(g => g.changed) ?? [];

  let stateText: string;
  const rankJobIdle = rankJob && !state?.paused && (!state || idle || !running);
  if (rankJobIdle) {
    stateText = rankJobWhy(conn.model, trans);
  } else if (state?.paused) {
    const at = String(state.paused_at ?? state.step);
    stateText =
      state.run !== null && state.run !== undefined
        ? trans.__('Paused before step %1 of run %2.', at, String(state.run))
        : trans.__('Paused before optimizer step %1.', at);
  } else if (!state || idle || !running) {
    stateText = trans.__('Idle: nothing is training.');
  } else if (byHand) {
    stateText = trans.__('Running. Controls apply at the end of backward.');
  } else {
    stateText = trans.__(
      'Running. Controls apply at the next optimizer.step().'
    );
  }

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
    <div
      className="jp-TorchDbg-control"
      data-idle={idle ? 'true' : 'false'}
      data-running={running ? 'true' : 'false'}
      data-rank-job={rankJob ? 'true' : 'false'}
      ref={root}
    >
      <div
        className="jp-TorchDbg-controlState"
        data-paused={state?.paused ? 'true' : 'false'}
      >
        <span className="jp-TorchDbg-controlStateText">{stateText}</span>
        {rankJobIdle && (
          <button
            className="jp-TorchDbg-link jp-TorchDbg-toRanks"
            onClick={() =>
              openSection(
                root.current?.closest('.jp-TorchDbg-body') ?? null,
                'ranks',
                () =>
                  root.current
                    ?.closest('.jp-TorchDbg-body')
                    ?.querySelector('[data-section="ranks"]')
                    ?.scrollIntoView({ block: 'start', behavior: 'smooth' })
              )
            }
          >
            {trans.__('Go to Ranks')}
          </button>
        )}
        {state?.clip !== null && state?.clip !== undefined && (
          <span className="jp-TorchDbg-chip jp-mod-ok jp-TorchDbg-clipChip">
            {trans.__('clip %1', String(state.clip))}
          </span>
        )}
        {truthful
          ? changed.length > 0 &&
            target && (
              <span
                className="jp-TorchDbg-chip jp-mod-ok jp-TorchDbg-lrChip"
                title={trans.__(
                  'Changed from this panel in this run; it was %1',
                  changed
                    .map(g => formatLr(wireNumber(g.initial_lr)))
                    .join(', ')
                )}
              >
                {trans.__(
                  'lr %1',
                  changed.map(g => formatLr(wireNumber(g.lr))).join(', ')
                )}
              </span>
            )
          : state?.lr_scale !== null &&
            state?.lr_scale !== undefined && (
              <span className="jp-TorchDbg-chip jp-mod-ok jp-TorchDbg-lrChip">
                {trans.__('LR ×%1', String(state.lr_scale))}
              </span>
            )}
      </div>
      <div className="jp-TorchDbg-controls">
        <label className="jp-TorchDbg-clipLabel">
          {trans.__('max norm')}{' '}
          <input
            className="jp-TorchDbg-clipInput"
            type="number"
            min="0"
            step="0.1"
            value={maxNorm}
            aria-invalid={!clipValid}
            onChange={e => setMaxNorm(e.currentTarget.value)}
          />
        </label>
        <button
          className="jp-Button jp-mod-styled jp-mod-accept jp-TorchDbg-small"
          disabled={!clipValid || !can.clip.enabled}
          title={can.clip.why || undefined}
          onClick={() => act('clip', { max_norm: clipValue })}
        >
          {trans.__('Clip')}
        </button>
        <button
          className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
          disabled={!can.unclip.enabled}
          title={can.unclip.why || undefined}
          onClick={() => act('unclip', {})}
        >
          {trans.__('Stop clipping')}
        </button>
      </div>
      <div className="jp-TorchDbg-controls">
        {state?.paused ? (
          <>
            <button
              className="jp-Button jp-mod-styled jp-mod-accept jp-TorchDbg-small"
              disabled={!can.resume.enabled}
              title={can.resume.why || undefined}
              onClick={() => act('resume', {})}
            >
              {trans.__('Resume')}
            </button>
            <button
              className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
              disabled={!can.step.enabled}
              title={can.step.why || undefined}
              onClick={() => act('step', {})}
            >
              {trans.__('Step')}
            </button>
          </>
        ) : (
          <button
            className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small jp-TorchDbg-pause"
            disabled={!can.pause.enabled}
            title={
              can.pause.why ||
              trans.__('Hold the loop before the next optimizer step')
            }
            onClick={() => act('pause', {})}
          >
            {trans.__('Pause')}
          </button>
        )}
        {!truthful && (
          <>
            <button
              className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
              disabled={!can.scaleLr.enabled}
              onClick={() => act('scale_lr', { factor: 0.5 })}
              title={
                can.scaleLr.why ||
                trans.__(
                  'Halve the learning rate of the optimizers from the next step'
                )
              }
            >
              {trans.__('LR ×0.5')}
            </button>
            <button
              className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
              disabled={!can.resetLr.enabled}
              title={can.resetLr.why || undefined}
              onClick={() => act('reset_lr', {})}
            >
              {trans.__('Reset LR')}
            </button>
          </>
        )}
      </div>
      {truthful && (
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
                  rerender(n => n + 1);
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
                <div
                  className="jp-TorchDbg-lrRow"
                  key={key}
                  data-group={g.index}
                >
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
                    title={
                      lrBlocked || trans.__('Enter sets it at the next step')
                    }
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
                target &&
                act('scale_lr', { factor: 0.5, optimizer: target.key })
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
              onClick={() =>
                target && act('reset_lr', { optimizer: target.key })
              }
            >
              {trans.__('Reset LR')}
            </button>
          </div>
          {target && byHand && (
            <div className="jp-TorchDbg-note">{byHandWhy}</div>
          )}
        </div>
      )}
      {control.pending.length > 0 && (
        <div className="jp-TorchDbg-note">
          {trans.__(
            'Pending until the running cell ends (no kernel subshells): %1',
            control.pending.join(', ')
          )}
        </div>
      )}
      {state?.last_refusal && (
        <div className="jp-TorchDbg-note">{state.last_refusal}</div>
      )}
      {note && <div className="jp-TorchDbg-note">{note}</div>}
    </div>
  );
}
