import { InputDialog, Notification } from '@jupyterlab/apputils';

import { RanksActionName, sendRanksAction } from '../panels/ranks';
import { IActionArgs } from '../protocol/messages';
import {
  addGuarded,
  addPlain,
  currentConnection,
  ICommandContext
} from './context';
import { CommandIDs } from './ids';

/** The commands' actions that take no arguments. */
type NoArgsAction = 'ranks_unclip' | 'ranks_pause' | 'ranks_resume';

/**
 * All-rank actions of a torch.distributed job (also in the panel's Ranks
 * section): every rank applies them at one agreed optimizer step. The ack
 * ("clip 1 applies at step 57 on ranks 0, 1") or the refusal is a notification.
 */
export function addRanksCommands(ctx: ICommandContext): void {
  const { trans } = ctx;
  const ranks = () => currentConnection(ctx)?.model.ranks ?? null;
  const send = async <K extends RanksActionName>(
    action: K,
    args: IActionArgs[K]
  ) => {
    const conn = currentConnection(ctx);
    if (!conn) {
      Notification.warning(trans.__('No kernel: open a notebook first.'));
      return;
    }
    const out = await sendRanksAction(conn, action, args, trans);
    if (out.ok) {
      Notification.info(out.text, { autoClose: 6000 });
    } else {
      Notification.error(out.text, { autoClose: 8000 });
    }
  };

  addGuarded(ctx, CommandIDs.ranksClip, 'ranksClip', {
    label: trans.__('Clip Gradients on All Ranks…'),
    caption: () =>
      trans.__('Clip gradients on every rank of the job from one agreed step'),
    execute: async () => {
      const result = await InputDialog.getNumber({
        title: trans.__('Clip gradients on all ranks at max_norm'),
        value: ranks()?.clip ?? 1.0
      });
      if (result.button.accept && result.value !== null && result.value > 0) {
        await send('ranks_clip', { max_norm: result.value });
      }
    }
  });
  const sendPlain = (action: NoArgsAction) => send(action, {});
  addPlain(
    ctx,
    sendPlain,
    CommandIDs.ranksUnclip,
    'ranksUnclip',
    'ranks_unclip',
    trans.__('Stop Clipping on All Ranks'),
    trans.__('Stop clipping on every rank from one agreed step')
  );
  addPlain(
    ctx,
    sendPlain,
    CommandIDs.ranksPause,
    'ranksPause',
    'ranks_pause',
    trans.__('Pause All Ranks'),
    trans.__('Hold every rank before one agreed optimizer step')
  );
  addPlain(
    ctx,
    sendPlain,
    CommandIDs.ranksResume,
    'ranksResume',
    'ranks_resume',
    trans.__('Resume All Ranks'),
    trans.__('Release every paused rank')
  );
  addGuarded(ctx, CommandIDs.ranksHalveLr, 'ranksScaleLr', {
    label: trans.__('Halve the Learning Rate on All Ranks'),
    caption: () =>
      trans.__(
        'Halve every param group’s learning rate on every rank at one agreed step'
      ),
    execute: () => send('ranks_scale_lr', { factor: 0.5 })
  });
}
