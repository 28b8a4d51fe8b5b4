import type { KernelMessage } from '@jupyterlab/services';

import { ConnectionState } from '../model/model';
import { IKernelLike } from './types';

/** The command that loads the kernel side. The only code the panel runs. */
export const LOAD_CODE = '%load_ext jupyterlab_torchdbg';

/**
 * Run `%load_ext jupyterlab_torchdbg` silently. Resolves to null once loaded,
 * else to the state that says why not (package missing, load failed, aborted).
 */
export async function loadKernelSide(
  kernel: IKernelLike
): Promise<ConnectionState | null> {
  const future = kernel.requestExecute(
    {
      code: LOAD_CODE,
      silent: true,
      store_history: false,
      allow_stdin: false,
      stop_on_error: false
    },
    true
  );
  const reply = (await future.done) as KernelMessage.IExecuteReplyMsg;
  const content = reply.content as KernelMessage.IExecuteReplyMsg['content'];
  if (content.status === 'ok') {
    return null;
  }
  if (content.status === 'error') {
    const err = content as KernelMessage.IReplyErrorContent;
    if (err.ename === 'ModuleNotFoundError' || err.ename === 'ImportError') {
      return {
        kind: 'package_missing',
        detail: `${err.ename}: ${err.evalue}`
      };
    }
    return {
      kind: 'not_loaded',
      reason: `Loading failed: ${err.ename}: ${err.evalue}`
    };
  }
  return {
    kind: 'not_loaded',
    reason: 'Loading was aborted by the kernel.'
  };
}

/** The kernel's language (`python`, ...), or null when it does not say. */
export async function kernelLanguage(
  kernel: IKernelLike
): Promise<string | null> {
  try {
    const info = await kernel.info;
    return info.language_info?.name ?? null;
  } catch {
    return null;
  }
}
