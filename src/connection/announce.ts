import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel } from '@jupyterlab/services';

import { LOADED_TARGET } from '../protocol/version';

/** Kernel connections whose `LOADED_TARGET` is registered (one callback each). */
const registered = new WeakSet<Kernel.IKernelConnection>();

/**
 * Hear the kernel side announce that it loaded (PROTOCOL.md, "Transport"): it
 * opens a comm on `LOADED_TARGET` and closes it at once, each time it loads.
 * Registered on every kernel a notebook or console of this page runs, so no
 * frontend here logs "Exception opening new comm" for it, and `onLoaded` (the
 * tracker's `kernelLoaded`) reattaches the panel after `%unload_ext` then
 * `%load_ext` typed by hand. The comm is the kernel's to close.
 */
export function listenForLoads(
  session: ISessionContext,
  onLoaded: (kernelId: string) => void
): void {
  const register = () => {
    const kernel = session.session?.kernel;
    if (!kernel || kernel.isDisposed || registered.has(kernel)) {
      return;
    }
    registered.add(kernel);
    kernel.registerCommTarget(LOADED_TARGET, () => {
      if (!kernel.isDisposed) {
        onLoaded(kernel.id);
      }
    });
  };
  session.kernelChanged.connect(register);
  register();
  void session.ready.then(register, () => undefined);
}
