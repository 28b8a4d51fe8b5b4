import type { Kernel } from '@jupyterlab/services';

import type { ConnectionState } from '../model/model';
import type { IHello, IOpen } from '../protocol/messages';
import { majorOf, PROTOCOL_VERSION } from '../protocol/version';

/** The `open` this tab sends: our protocol version and client id (R46). */
export function openMessage(clientId: string | null): IOpen {
  return {
    method: 'open',
    protocol_version: PROTOCOL_VERSION,
    client: 'jupyterlab',
    ...(clientId ? { client_id: clientId } : {})
  };
}

/**
 * The state a `hello` refuses us with: `version_mismatch` when the kernel did
 * not accept our version or speaks another major version; null when it can
 * be used.
 */
export function helloRefusal(hello: IHello): ConnectionState | null {
  const ours = majorOf(PROTOCOL_VERSION);
  const theirs = majorOf(hello.protocol_version);
  if (hello.accepted && ours === theirs) {
    return null;
  }
  return {
    kind: 'version_mismatch',
    message:
      `Protocol mismatch: the lab extension speaks ${PROTOCOL_VERSION}, ` +
      `the kernel package jupyterlab_torchdbg ${hello.package_version} ` +
      `speaks ${hello.protocol_version}. Install the same version in the ` +
      "kernel's environment and in JupyterLab's."
  };
}

/** Close a comm unless disposed; one the kernel already closed is fine. */
export function closeQuietly(comm: Kernel.IComm): void {
  if (comm.isDisposed) {
    return;
  }
  try {
    comm.close();
  } catch {
    // the kernel is gone or closed it first; nothing to close
  }
}
