import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useRef } from 'react';

import { TorchDbgConnection } from '../../connection/connection';
import { rankJobWhy } from '../../model/availability';
import { wireNumber } from '../../protocol/messages';
import { openSection } from '../../sidebar/section';
import { formatLr } from './lr';

/**
 * What the loop is doing, in words ("Paused before optimizer step 12."), with
 * the clip and LR the panel set as chips; during a multi-process job, a link
 * to the Ranks section, where its controls are.
 */
export function ControlStateLine(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
  rankJob: boolean;
}): JSX.Element {
  const { conn, trans, rankJob } = props;
  const control = conn.model.control;
  const root = useRef<HTMLDivElement>(null);
  const state = control.state;
  const truthful = state?.targets !== undefined;
  const idle = control.idle || state === null;
  const running = control.running;
  const target = control.target;
  const byHand = target?.by_hand ?? false;
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

  return (
    <div
      className="jp-TorchDbg-controlState"
      ref={root}
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
                changed.map(g => formatLr(wireNumber(g.initial_lr))).join(', ')
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
  );
}
