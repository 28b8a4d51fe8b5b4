import type { Kernel } from '@jupyterlab/services';

import { IAck, IError, KernelMessage } from '../protocol/messages';

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

/** The reply to an action: the kernel's ack or error. */
export type ActionReply = IAck | IError;

/** A kernel message as delivered to listeners. */
export interface KernelMessageEvent {
  data: KernelMessage;
  buffers: (ArrayBuffer | ArrayBufferView)[];
}
