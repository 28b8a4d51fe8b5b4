import type { Kernel } from '@jupyterlab/services';

import type { TorchDbgModel } from '../model/model';
import {
  ActionName,
  IError,
  ITypedAck,
  KernelMessage
} from '../protocol/messages';

/** The subset of a kernel connection this module uses (a fake in jest). */
export type IKernelLike = Pick<
  Kernel.IKernelConnection,
  | 'id'
  | 'status'
  | 'connectionStatus'
  | 'createComm'
  | 'requestExecute'
  | 'statusChanged'
  | 'connectionStatusChanged'
  | 'disposed'
  | 'info'
  | 'isDisposed'
>;

/**
 * The reply to an action: the kernel's ack, with the result the schema gives
 * that action (`ActionResult<K>`), or an error.
 */
export type ActionReply<K extends ActionName = ActionName> =
  ITypedAck<K> | IError;

/** A kernel message as delivered to listeners. */
export interface KernelMessageEvent {
  data: KernelMessage;
  buffers: (ArrayBuffer | ArrayBufferView)[];
}

/** The part of `window` the connection listens on. */
export type IPageEvents = Pick<
  EventTarget,
  'addEventListener' | 'removeEventListener'
>;

/** What a `TorchDbgConnection` is made with. */
export interface IConnectionOptions {
  kernel: IKernelLike;
  model?: TorchDbgModel;
  /** Run `%load_ext jupyterlab_torchdbg` when the target is missing. */
  autoLoad?: boolean;
  /** This tab's client id for `open` (default: `tabClientId`, R46). */
  clientId?: () => Promise<string | null>;
  /** Where `pagehide`/`pageshow` fire (default: `window`; null: none). */
  page?: IPageEvents | null;
}
