import type { TorchDbgModel } from '../model/model';

/**
 * What the panel shows once its kernel restarts or dies. A kernel that died
 * (`autorestarting`, `dead`) leaves what the panel showed, read only, marked
 * with the time it died, until the next kernel connects and hands over its
 * record; a restart asked for (`restarting`) clears it.
 */
export function showKernelGone(
  model: TorchDbgModel,
  status: 'restarting' | 'autorestarting' | 'dead'
): void {
  if (status === 'dead') {
    if (model.hello && model.died === null) {
      model.died = Date.now() / 1000;
    }
    model.state = { kind: 'dead' };
    return;
  }
  if (status === 'autorestarting' && model.hello) {
    model.died = Date.now() / 1000;
  } else {
    model.reset();
  }
  model.state = { kind: 'restarting' };
}
