import { InputDialog, Notification } from '@jupyterlab/apputils';

import { formatLr, sendControl } from '../panels/control';
import { ActionName, IActionArgs, wireNumber } from '../protocol/messages';
import {
  addGuarded,
  addPlain,
  currentConnection,
  ICommandContext
} from './context';
import { CommandIDs } from './ids';
import { askLearningRate } from './lrDialog';

/** The commands' actions that take no arguments. */
type NoArgsAction = 'unclip' | 'pause' | 'resume' | 'step';

/**
 * Training control: clip, pause / resume / single step and the learning rate
 * (also in the panel's "Training control" section, with the same enabled
 * states: both ask `model/availability.ts`). The LR commands act on the
 * optimizer the panel's LR controls show (the one picked there, else the one
 * that stepped last).
 */
export function addControlCommands(ctx: ICommandContext): void {
  const { trans } = ctx;
  const current = () => currentConnection(ctx);
  const target = () => current()?.model.control.target ?? null;
  const control = async <K extends ActionName>(
    action: K,
    args: IActionArgs[K],
    done?: string
  ) => {
    const conn = current();
    if (!conn) {
      Notification.warning(trans.__('No kernel: open a notebook first.'));
      return;
    }
    const error = await sendControl(conn, action, args);
    if (error) {
      Notification.error(error, { autoClose: 6000 });
    } else if (done) {
      Notification.info(done, { autoClose: 4000 });
    }
  };

  addGuarded(ctx, CommandIDs.clip, 'clip', {
    label: trans.__('Clip Gradients…'),
    caption: () =>
      trans.__(
        'Clip the gradient norm at every optimizer step from the next one'
      ),
    execute: async () => {
      const result = await InputDialog.getNumber({
        title: trans.__('Clip gradients at max_norm'),
        value: current()?.model.control.state?.clip ?? 1.0
      });
      if (result.button.accept && result.value !== null) {
        await control('clip', { max_norm: result.value });
      }
    }
  });
  const sendPlain = (action: NoArgsAction) => control(action, {});
  addPlain(
    ctx,
    sendPlain,
    CommandIDs.unclip,
    'unclip',
    'unclip',
    trans.__('Stop Clipping'),
    trans.__('Stop clipping')
  );
  addPlain(
    ctx,
    sendPlain,
    CommandIDs.pause,
    'pause',
    'pause',
    trans.__('Pause Training'),
    trans.__('Hold the loop before the next optimizer step')
  );
  addPlain(
    ctx,
    sendPlain,
    CommandIDs.resume,
    'resume',
    'resume',
    trans.__('Resume Training'),
    trans.__('Release the pause')
  );
  addPlain(
    ctx,
    sendPlain,
    CommandIDs.step,
    'step',
    'step',
    trans.__('Single Step (while paused)'),
    trans.__('Let exactly one optimizer step through')
  );

  addGuarded(ctx, CommandIDs.halveLr, 'scaleLr', {
    label: trans.__('Halve the Learning Rate (LR ×0.5)'),
    caption: () =>
      trans.__(
        'Halve the learning rate of %1 from its next step',
        target()?.name ?? trans.__('the optimizer')
      ),
    execute: () => {
      // no target: a kernel before protocol 2.3 scales every optimizer
      const t = target();
      return control(
        'scale_lr',
        t ? { factor: 0.5, optimizer: t.key } : { factor: 0.5 },
        trans.__('lr ×0.5: it applies at the next step.')
      );
    }
  });
  addGuarded(ctx, CommandIDs.setLr, 'setLr', {
    label: trans.__('Set the Learning Rate…'),
    caption: () =>
      trans.__(
        'Set the learning rate of %1 from its next step',
        target()?.name ?? trans.__('the optimizer')
      ),
    execute: async () => {
      const t = target();
      if (!t) {
        return;
      }
      const choice = await askLearningRate(t, trans);
      if (!choice) {
        return;
      }
      await control(
        'set_lr',
        choice.group === null
          ? { lr: choice.lr, optimizer: t.key }
          : { lr: choice.lr, optimizer: t.key, group: choice.group },
        trans.__('lr %1 set: it applies at the next step.', formatLr(choice.lr))
      );
    }
  });
  addGuarded(ctx, CommandIDs.resetLr, 'resetLr', {
    label: trans.__('Reset the Learning Rate (Reset LR)'),
    caption: () => {
      const changed = target()?.groups.filter(g => g.changed) ?? [];
      return trans.__(
        'Restore the learning rate from before the panel’s first change: %1',
        changed.map(g => formatLr(wireNumber(g.initial_lr))).join(', ')
      );
    },
    execute: () => {
      const t = target();
      return control(
        'reset_lr',
        t ? { optimizer: t.key } : {},
        trans.__('The learning rate is reset.')
      );
    }
  });
}
