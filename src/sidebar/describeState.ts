import type { TranslationBundle } from '@jupyterlab/translation';

import { ConnectionState } from '../model/model';

/** The install command shown when the kernel's environment lacks the package. */
export const INSTALL_COMMAND = '%pip install jupyterlab_torchdbg';

/** One sentence for every state: the panel always says why it shows nothing. */
export function describeState(
  state: ConnectionState,
  trans: TranslationBundle
): string {
  switch (state.kind) {
    case 'no_kernel':
      return trans.__(
        'Open a notebook or console with a Python kernel to start debugging.'
      );
    case 'not_python':
      return trans.__(
        'This kernel runs %1; the Torch Debugger needs a Python kernel.',
        state.language
      );
    case 'connecting':
      return trans.__('Connecting to the kernel…');
    case 'busy_waiting':
      return trans.__(
        'The kernel is busy running a cell and cannot answer until it ends (this kernel has no subshells). The panel attaches when the cell finishes.'
      );
    case 'loading':
      return trans.__('Loading jupyterlab_torchdbg in the kernel…');
    case 'not_loaded':
      return trans.__(
        'The kernel side is not loaded. %1 Run %load_ext jupyterlab_torchdbg or click Load.',
        state.reason
      );
    case 'package_missing':
      return trans.__(
        "The kernel's environment has no jupyterlab_torchdbg (%1). Install it there, then click Load:",
        state.detail
      );
    case 'version_mismatch':
      return state.message;
    case 'restarting':
      return trans.__(
        'The kernel is restarting; the panel reattaches when it is ready.'
      );
    case 'dead':
      return trans.__('The kernel died. Restart it to continue.');
    case 'connected':
      return trans.__('Connected.');
  }
}
