/**
 * The protocol version and comm target. Kept equal to the schema's
 * `x-protocol-version` and to the Python constant (checked by jest and pytest).
 */
export const PROTOCOL_VERSION = '2.6';
export const COMM_TARGET = 'jupyterlab_torchdbg';
/** The comm the kernel side opens (and closes at once) each time it loads. */
export const LOADED_TARGET = 'jupyterlab_torchdbg.loaded';

/**
 * The major part of a `MAJOR.MINOR` version string, or null.
 */
export function majorOf(version: unknown): number | null {
  if (typeof version !== 'string') {
    return null;
  }
  const m = /^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$/.exec(version);
  return m ? Number(m[1]) : null;
}
