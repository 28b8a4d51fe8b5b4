import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import type { IRankAlarm } from '../../protocol/generated';

/** "rank 1" / "ranks 0, 2". */
function rankList(ranks: readonly number[], trans: TranslationBundle): string {
  return trans._n('rank %2', 'ranks %2', ranks.length, ranks.join(', '));
}

/**
 * A hang at the collective (protocol 2.7, R57): the collective the others wait
 * in and the ranks that never entered it, then every rank's stack merged by
 * where it stopped (its innermost own frame). One short line per fact, wrapped
 * anywhere, so it stays readable in a 250 px sidebar; text only.
 */
export function HangView(props: {
  alarm: IRankAlarm;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { alarm: a, trans } = props;
  const c = a.collective;
  const merged = a.merged ?? [];
  if (!c && merged.length === 0) {
    return null;
  }
  const facts = c
    ? [
        c.op ?? trans.__('a collective'),
        trans.__('seq %1', String(c.seq)),
        trans.__('%1 group', c.group),
        ...(c.shapes ? [c.shapes] : []),
        ...(c.ddp_backward
          ? [
              c.op === 'all_reduce'
                ? trans.__('DDP backward')
                : trans.__('in backward')
            ]
          : [])
      ]
    : [];
  return (
    <div className="jp-TorchDbg-rankHang">
      {c && (
        <div className="jp-TorchDbg-rankHangCollective">
          <span className="jp-TorchDbg-rankHangLabel">
            {trans._n(
              'rank %2 waits in',
              'ranks %2 wait in',
              c.ranks_in.length,
              c.ranks_in.join(', ')
            )}
          </span>{' '}
          <code>{facts.join(' · ')}</code>
        </div>
      )}
      {c && c.never_entered.length > 0 && (
        <div className="jp-TorchDbg-rankHangMissing">
          {trans.__('never entered: %1', rankList(c.never_entered, trans))}
        </div>
      )}
      {merged.length > 0 && (
        <ul
          className="jp-TorchDbg-rankMerged"
          aria-label={trans.__('Stacks merged by where each rank stopped')}
        >
          {merged.map(m => (
            <li
              key={m.ranks.join(',')}
              data-ranks={m.ranks.join(',')}
              className={
                c && m.ranks.some(r => c.never_entered.includes(r))
                  ? 'jp-mod-missing'
                  : undefined
              }
            >
              <span className="jp-TorchDbg-rankMergedWho">
                {rankList(m.ranks, trans)}
              </span>{' '}
              <code className="jp-TorchDbg-rankMergedWhere">{m.where}</code>
              {m.in && (
                <span className="jp-TorchDbg-rankMergedIn">
                  {trans.__('in %1', m.in)}
                </span>
              )}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
