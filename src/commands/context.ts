import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';

import { ActionReply, TorchDbgConnection } from '../connection/connection';
import { KernelTracker } from '../connection/tracker';
import {
  availability,
  IActionAvailability,
  IAvailability
} from '../model/availability';

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

/** Show the kernel's error reply to an action (an ack needs no notice). */
export function notifyReply(reply: ActionReply): void {
  if (reply.method === 'error') {
    Notification.error(reply.message, { autoClose: 5000 });
  }
}

/** Show why an action could not be sent (the kernel side is not connected). */
export function notifyFailure(e: Error): void {
  Notification.warning(e.message, { autoClose: 5000 });
}
