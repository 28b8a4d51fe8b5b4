import type { TranslationBundle } from '@jupyterlab/translation';

import type { TorchDbgConnection } from '../../connection/connection';
import { IActionArgs } from '../../protocol/messages';
import { RanksActionName } from './model';

/** "0, 1" from the ack's `ranks` (or null when it has none). */
function rankList(result: { [key: string]: unknown }): string | null {
  const ranks = result.ranks;
  if (!Array.isArray(ranks) || ranks.length === 0) {
    return null;
  }
  return ranks.map(r => String(r)).join(', ');
}

/**
 * The ack of an all-rank action in words: "clip applies at step 57 on ranks
 * 0, 1". Reads `at_step` and `ranks` from the ack's result; a kernel that
 * sends a `message` instead is shown as is.
 */
export function describeRanksAck(
  action: RanksActionName,
  args: { [key: string]: unknown },
  result: { [key: string]: unknown },
  trans: TranslationBundle
): string {
  const atStep =
    typeof result.at_step === 'number' ? String(result.at_step) : null;
  const ranks = rankList(result);
  if (atStep === null || ranks === null) {
    if (action === 'ranks_resume' && ranks !== null) {
      return trans.__('resumed ranks %1', ranks);
    }
    if (typeof result.message === 'string' && result.message) {
      return result.message;
    }
  }
  const at = atStep ?? '?';
  const on = ranks ?? trans.__('every rank');
  switch (action) {
    case 'ranks_clip':
      return trans.__(
        'clip %1 applies at step %2 on ranks %3',
        String(args.max_norm),
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
        String(args.factor),
        at,
        on
      );
    case 'ranks_resume':
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
  let out: { ok: boolean; text: string };
  try {
    const reply = await conn.sendAction(action, args, () => {
      ranks.note = {
        kind: 'sending',
        action,
        text: trans.__(
          'Waits for the running cell to end (no kernel subshells).'
        )
      };
    });
    out =
      reply.method === 'error'
        ? { ok: false, text: reply.message }
        : {
            ok: true,
            text: describeRanksAck(
              action,
              args as { [key: string]: unknown },
              reply.result,
              trans
            )
          };
  } catch (e) {
    out = { ok: false, text: (e as Error).message };
  }
  ranks.note = { kind: out.ok ? 'ack' : 'refused', action, text: out.text };
  return out;
}
