import type { TranslationBundle } from '@jupyterlab/translation';

import { ActionService } from '../../connection/actions';
import type { TorchDbgConnection } from '../../connection/connection';
import { ActionResult, IActionArgs } from '../../protocol/messages';
import { RanksActionName } from './model';

/**
 * The ack of an all-rank action in words: "clip 1 applies at step 57 on
 * ranks 0, 1", from its result (`at_step` and `ranks`, the schema's result of
 * every `ranks_*` action; `ranks_resume` has no step).
 */
export function describeRanksAck<K extends RanksActionName>(
  action: K,
  args: IActionArgs[K],
  result: ActionResult<K>,
  trans: TranslationBundle
): string {
  const on =
    result.ranks.length > 0
      ? result.ranks.map(r => String(r)).join(', ')
      : trans.__('every rank');
  const at = 'at_step' in result ? String(result.at_step) : '?';
  switch (action) {
    case 'ranks_clip':
      return trans.__(
        'clip %1 applies at step %2 on ranks %3',
        String((args as IActionArgs['ranks_clip']).max_norm),
        at,
        on
      );
    case 'ranks_unclip':
      return trans.__('clipping stops at step %1 on ranks %2', at, on);
    case 'ranks_pause':
      return trans.__('pause at step %1 on ranks %2', at, on);
    case 'ranks_scale_lr':
      return trans.__(
        'LR ×%1 applies at step %2 on ranks %3',
        String((args as IActionArgs['ranks_scale_lr']).factor),
        at,
        on
      );
    default:
      return trans.__('resumed ranks %1', on);
  }
}

/**
 * Send an all-rank action and note its outcome in the ranks model (the panel
 * shows it under its buttons): the ack in words, or the kernel's refusal.
 * Resolves to that note.
 */
export async function sendRanksAction<K extends RanksActionName>(
  conn: TorchDbgConnection,
  action: K,
  args: IActionArgs[K],
  trans: TranslationBundle
): Promise<{ ok: boolean; text: string }> {
  const ranks = conn.model.ranks;
  ranks.note = { kind: 'sending', action, text: trans.__('sent…') };
  const outcome = await ActionService.of(conn).send(action, args, () => {
    ranks.note = {
      kind: 'sending',
      action,
      text: trans.__('Waits for the running cell to end (no kernel subshells).')
    };
  });
  const out = outcome.ok
    ? {
        ok: true,
        text: describeRanksAck(action, args, outcome.result, trans)
      }
    : { ok: false, text: outcome.error };
  ranks.note = { kind: out.ok ? 'ack' : 'refused', action, text: out.text };
  return out;
}
