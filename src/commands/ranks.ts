import { InputDialog, Notification } from '@jupyterlab/apputils';

import { RanksActionName, sendRanksAction } from '../panels/ranks';
import { IActionArgs } from '../protocol/messages';
import { can, captionOf, currentConnection, ICommandContext } from './context';
import { CommandIDs } from './ids';

/**
 * All-rank actions of a torch.distributed job (also in the panel's Ranks
 * section): every rank applies them at one agreed optimizer step. The ack
 * ("clip 1 applies at step 57 on ranks 0, 1") or the refusal is a notification.
 */
export function addRanksCommands(ctx: ICommandContext): void {
  const { app, trans } = ctx;
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

  app.commands.addCommand(CommandIDs.ranksClip, {
    label: trans.__('Clip Gradients on All Ranks…'),
    caption: () =>
      captionOf(
        ctx,
        'ranksClip',
        trans.__('Clip gradients on every rank of the job from one agreed step')
      ),
    isEnabled: () => can(ctx, 'ranksClip').enabled,
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
  app.commands.addCommand(CommandIDs.ranksUnclip, {
    label: trans.__('Stop Clipping on All Ranks'),
    caption: () =>
      captionOf(
        ctx,
        'ranksUnclip',
        trans.__('Stop clipping on every rank from one agreed step')
      ),
    isEnabled: () => can(ctx, 'ranksUnclip').enabled,
    execute: () => send('ranks_unclip', {})
  });
  app.commands.addCommand(CommandIDs.ranksPause, {
    label: trans.__('Pause All Ranks'),
    caption: () =>
      captionOf(
        ctx,
        'ranksPause',
        trans.__('Hold every rank before one agreed optimizer step')
      ),
    isEnabled: () => can(ctx, 'ranksPause').enabled,
    execute: () => send('ranks_pause', {})
  });
  app.commands.addCommand(CommandIDs.ranksResume, {
    label: trans.__('Resume All Ranks'),
    caption: () =>
      captionOf(ctx, 'ranksResume', trans.__('Release every paused rank')),
    isEnabled: () => can(ctx, 'ranksResume').enabled,
    execute: () => send('ranks_resume', {})
  });
  app.commands.addCommand(CommandIDs.ranksHalveLr, {
    label: trans.__('Halve the Learning Rate on All Ranks'),
    caption: () =>
      captionOf(
        ctx,
        'ranksScaleLr',
        trans.__(
          'Halve every param group’s learning rate on every rank at one agreed step'
        )
      ),
    isEnabled: () => can(ctx, 'ranksScaleLr').enabled,
    execute: () => send('ranks_scale_lr', { factor: 0.5 })
  });
}
