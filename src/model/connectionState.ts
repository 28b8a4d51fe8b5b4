/**
 * Why the panel shows what it shows. Every state other than `connected` is
 * rendered as a sentence that says why there is no data (never a blank panel).
 */
export type ConnectionState =
  | { kind: 'no_kernel' }
  | { kind: 'not_python'; language: string }
  | { kind: 'connecting' }
  | { kind: 'busy_waiting' }
  | { kind: 'loading' }
  | { kind: 'not_loaded'; reason: string }
  | { kind: 'package_missing'; detail: string }
  | { kind: 'version_mismatch'; message: string }
  | { kind: 'restarting' }
  | { kind: 'dead' }
  | { kind: 'connected' };
