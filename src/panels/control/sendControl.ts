import { ActionService } from '../../connection/actions';
import { TorchDbgConnection } from '../../connection/connection';
import { ActionName, IActionArgs } from '../../protocol/messages';

/**
 * Send a control action through the connection's action service: note it as
 * pending in the control model while the kernel is busy without subshells,
 * and resolve to the kernel's error message (or '' on success).
 */
export async function sendControl<K extends ActionName>(
  conn: TorchDbgConnection,
  action: K,
  args: IActionArgs[K]
): Promise<string> {
  const control = conn.model.control;
  let pending = false;
  try {
    const outcome = await ActionService.of(conn).send(action, args, () => {
      pending = true;
      control.addPending(action);
    });
    return outcome.ok ? '' : outcome.error;
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
