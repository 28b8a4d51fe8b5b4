import { TorchDbgModel } from '../model/model';
import { KernelMessage } from '../protocol/messages';
import { ActionReply } from './types';

/** What the connection still has to do once a message reached the model. */
export type RouteOutcome =
  /** A stream message (`series`, `snapshot`) applied: not passed on to listeners. */
  | { kind: 'stream' }
  /** A `series` message could not be applied (a `seq` gap or unknown block id). */
  | { kind: 'resync' }
  /**
   * A state message applied (or one this panel does not know): pass it on;
   * `resync`: it lacked what an earlier message had (a `ranks` broadcast's
   * identities, protocol 2.8): ask for the snapshot too.
   */
  | { kind: 'message'; resync?: boolean }
  /** The answer to a request: resolve it, then pass it on. */
  | { kind: 'reply'; reply: ActionReply };

/**
 * Dispatch one kernel message (other than the first `hello`) on its `method`
 * to the part of the model it updates. `sessionId` is the kernel side's
 * current session: a later `hello` of the same session updates the
 * capabilities (e.g. torch was imported after loading).
 */
export function routeMessage(
  model: TorchDbgModel,
  data: KernelMessage,
  buffers: (ArrayBuffer | ArrayBufferView)[],
  sessionId: string | null
): RouteOutcome {
  switch (data.method) {
    case 'series':
      return model.applySeries(data, buffers)
        ? { kind: 'stream' }
        : { kind: 'resync' };
    case 'snapshot':
      model.applySnapshot(data, buffers);
      return { kind: 'stream' };
    case 'grads':
      model.grads.apply(data);
      break;
    case 'alert':
      model.grads.applyAlert(data);
      break;
    case 'exception':
      model.exception.apply(data);
      break;
    case 'control':
      model.control.apply(data);
      break;
    case 'memory':
      model.memory.apply(data);
      break;
    case 'runs':
      model.applyRuns(data);
      break;
    case 'oom':
      model.memory.applyOom(data);
      break;
    case 'ranks':
      if (!model.ranks.apply(data)) {
        return { kind: 'message', resync: true };
      }
      break;
    case 'record':
      model.record.apply(data);
      break;
    case 'record_run':
      model.record.applyRun(data);
      break;
    case 'hello':
      if (data.accepted && data.session_id === sessionId) {
        model.hello = data;
      }
      break;
    case 'ack':
    case 'error':
      if (data.method === 'error' && data.code === 'protocol_mismatch') {
        model.state = { kind: 'version_mismatch', message: data.message };
      }
      // An ack's result has the shape the schema gives its action: the
      // kernel's replies are checked against it (tests/kernel_client.py).
      return { kind: 'reply', reply: data as ActionReply };
    default:
      break;
  }
  return { kind: 'message' };
}
