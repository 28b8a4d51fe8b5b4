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

/** A command that acts on the current kernel, enabled as the panel's button. */
export interface IGuardedCommand {
  /** The palette's label (a function when it says the state, e.g. start/stop). */
  label: string | (() => string);
  /** What the command does; while it is disabled the caption says why instead. */
  caption: () => string;
  execute: () => unknown;
  isToggled?: () => boolean;
}

/**
 * Register a command whose enabled state and disabled reason are those of the
 * action `key` (`can`, `captionOf`): the panel's button and the palette item
 * agree by construction.
 */
export function addGuarded(
  ctx: ICommandContext,
  id: string,
  key: keyof IActionAvailability,
  command: IGuardedCommand
): void {
  const { label, caption, execute, isToggled } = command;
  ctx.app.commands.addCommand(id, {
    label,
    caption: () => captionOf(ctx, key, caption()),
    isEnabled: () => can(ctx, key).enabled,
    execute,
    ...(isToggled ? { isToggled } : {})
  });
}

/**
 * A command for an action without arguments (`send(action)` when run), with a
 * fixed label and caption: pause, resume, unclip, on one kernel or all ranks.
 */
export function addPlain<A extends string>(
  ctx: ICommandContext,
  send: (action: A) => Promise<unknown>,
  id: string,
  key: keyof IActionAvailability,
  action: A,
  label: string,
  what: string
): void {
  addGuarded(ctx, id, key, {
    label,
    caption: () => what,
    execute: () => send(action)
  });
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
