import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';

import { ActionService } from '../connection/actions';
import { TorchDbgConnection } from '../connection/connection';
import { KernelTracker } from '../connection/tracker';
import {
  availability,
  IActionAvailability,
  IAvailability
} from '../model/availability';
import { ActionName, ActionResult, IActionArgs } from '../protocol/messages';

/**
 * What every feature's commands need: the application (to register commands
 * and reach the shell), the tracker (whose current connection the commands act
 * on) and the translation bundle for labels.
 */
export interface ICommandContext {
  app: JupyterFrontEnd;
  tracker: KernelTracker;
  trans: TranslationBundle;
}

/** The current kernel's connection, or null when no notebook/console is followed. */
export function currentConnection(
  ctx: ICommandContext
): TorchDbgConnection | null {
  return ctx.tracker.current;
}

/** Whether the current kernel's side answered `hello` (actions can be sent). */
export function isConnected(ctx: ICommandContext): boolean {
  return ctx.tracker.current?.isConnected ?? false;
}

/**
 * Whether the action `key` can run now on the current kernel, and if not why:
 * the same answer the panel's buttons get (`model/availability.ts`).
 */
export function can(
  ctx: ICommandContext,
  key: keyof IActionAvailability
): IAvailability {
  const model = ctx.tracker.current?.model;
  if (!model) {
    return {
      enabled: false,
      why: ctx.trans.__('No kernel: open a notebook first.')
    };
  }
  return availability(model, ctx.trans)[key];
}

/**
 * A command's caption: why it is disabled now, else what it does (the palette
 * shows it as the item's tooltip).
 */
export function captionOf(
  ctx: ICommandContext,
  key: keyof IActionAvailability,
  what: string
): string {
  const a = can(ctx, key);
  return a.enabled ? what : a.why;
}

/**
 * Send an action from a command through the connection's action service;
 * resolves to its typed result, or null after showing why not: the kernel's
 * refusal as an error (`errorClose` ms), a request that could not be sent
 * (the kernel side is not connected) as a warning.
 */
export async function runAction<K extends ActionName>(
  conn: TorchDbgConnection,
  action: K,
  args: IActionArgs[K],
  errorClose = 5000
): Promise<ActionResult<K> | null> {
  const outcome = await ActionService.of(conn).send(action, args);
  if (outcome.ok) {
    return outcome.result;
  }
  if (outcome.code === 'unsent') {
    Notification.warning(outcome.error, { autoClose: 5000 });
  } else {
    Notification.error(outcome.error, { autoClose: errorClose });
  }
  return null;
}
