import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

/** Executions followed at once per kernel (a kernel that dies mid-cell leaves one). */
const MAX_OPEN = 100;

/** A cell of `kernelId` finished without error at `time` (Unix s, kernel clock). */
export interface ICellFinished {
  kernelId: string;
  time: number;
}

/**
 * When each kernel last finished a cell without error, from its iopub stream
 * (every client's cells: `execute_input`, then no `error`, then `status:
 * idle`, all with the same parent request; silent executions such as the
 * panel's own `%load_ext` publish no `execute_input` and do not count). Kept
 * per kernel while the panel follows another one, so the exception view of a
 * kernel it comes back to knows whether a later cell ran (issue #22). The
 * kernel's own clock (the message header's date) is compared with the
 * exception's capture time.
 */
export class CellOutcomes {
  /** Emitted for each cell that finished without error. */
  get finished(): ISignal<this, ICellFinished> {
    return this._finished;
  }

  /** The end of the newest cell of `kernelId` that finished without error. */
  lastOk(kernelId: string): number | null {
    return this._lastOk.get(kernelId) ?? null;
  }

  /** Follow `kernel`'s iopub stream (once per kernel connection). */
  watch(kernel: Kernel.IKernelConnection): void {
    if (this._watched.has(kernel)) {
      return;
    }
    this._watched.add(kernel);
    // parent msg_id -> still ok (no `error` yet)
    const open = new Map<string, boolean>();
    const onIopub = (
      _: Kernel.IKernelConnection,
      msg: KernelMessage.IIOPubMessage
    ) => {
      const parent = msg.parent_header as Partial<KernelMessage.IHeader>;
      if (parent?.msg_type !== 'execute_request' || !parent.msg_id) {
        return;
      }
      const id = parent.msg_id;
      const type = msg.header.msg_type;
      if (type === 'execute_input') {
        open.set(id, true);
        if (open.size > MAX_OPEN) {
          open.delete(open.keys().next().value as string);
        }
      } else if (type === 'error' && open.has(id)) {
        open.set(id, false);
      } else if (
        type === 'status' &&
        (msg.content as { execution_state?: string }).execution_state ===
          'idle' &&
        open.has(id)
      ) {
        const ok = open.get(id);
        open.delete(id);
        if (ok) {
          this._record(kernel.id, kernelTime(msg.header.date));
        }
      }
    };
    kernel.iopubMessage.connect(onIopub);
    kernel.disposed.connect(() => {
      kernel.iopubMessage.disconnect(onIopub);
      this._lastOk.delete(kernel.id);
    });
  }

  private _record(kernelId: string, time: number): void {
    const last = this._lastOk.get(kernelId);
    if (last === undefined || time > last) {
      this._lastOk.set(kernelId, time);
    }
    this._finished.emit({ kernelId, time });
  }

  private _watched = new WeakSet<Kernel.IKernelConnection>();
  private _lastOk = new Map<string, number>();
  private _finished = new Signal<this, ICellFinished>(this);
}

/** A message header's date in Unix seconds (now, when it cannot be read). */
export function kernelTime(date: string | undefined): number {
  const ms = date ? Date.parse(date) : NaN;
  return (Number.isFinite(ms) ? ms : Date.now()) / 1000;
}
