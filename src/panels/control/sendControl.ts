import { TorchDbgConnection } from '../../connection/connection';
import { ActionName, IActionArgs } from '../../protocol/messages';

/**
 * Send a control action: note it as pending while the kernel is busy without
 * subshells, and resolve to the kernel's error message (or '' on success).
 */
export async function sendControl<K extends ActionName>(
  conn: TorchDbgConnection,
  action: K,
  args: IActionArgs[K]
): Promise<string> {
  const control = conn.model.control;
  let pending = false;
  try {
    const reply = await conn.sendAction(action, args, () => {
      pending = true;
      control.addPending(action);
    });
    return reply.method === 'error' ? reply.message : '';
  } catch (e) {
    return (e as Error).message;
  } finally {
    if (pending) {
      control.removePending(action);
    }
  }
}

/** Send a control action; `done` gets the kernel's error ('' on success). */
export type ControlAct = <K extends ActionName>(
  action: K,
  args: IActionArgs[K],
  done?: (error: string) => void
) => void;
