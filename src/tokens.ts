import { Token } from '@lumino/coreutils';

import { KernelTracker } from './connection/tracker';

/** The Torch Debugger service: the kernel tracker other plugins build on. */
export interface ITorchDebugger {
  readonly tracker: KernelTracker;
}

export const ITorchDebugger = new Token<ITorchDebugger>(
  'jupyterlab_torchdbg:ITorchDebugger',
  'The Torch Debugger: per-kernel connections to the kernel-side module.'
);
