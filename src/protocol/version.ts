/**
 * The protocol version (generated from the schema's `x-protocol-version`, the one
 * place it is kept; Python reads the same field) and the comm target.
 */
export { PROTOCOL_VERSION } from './generated';
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
