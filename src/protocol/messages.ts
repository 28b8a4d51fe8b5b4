/**
 * Typed messages of the comm protocol. The JSON Schema in
 * `jupyterlab_torchdbg/protocol/messages.schema.json` is the source of truth;
 * jest validates messages built with these types against it.
 */

/** A number, or NaN / infinities encoded as strings (JSON has none). */
export type WireNumber = number | 'NaN' | 'Infinity' | '-Infinity';

export interface IAvailability {
  available: boolean;
  version?: string | null;
  reason?: string | null;
}

export interface ICudaCapability {
  available: boolean | null;
  initialized: boolean;
  device_count?: number | null;
  version?: string | null;
  reason?: string | null;
}

export interface ICapabilities {
  torch: IAvailability;
  cuda: ICudaCapability;
  nvml: IAvailability;
  subshells: boolean;
}

export interface IHello {
  method: 'hello';
  protocol_version: string;
  package_version: string;
  capabilities: ICapabilities;
  session_id: string;
  accepted: boolean;
  actions?: string[];
}

/** A group of series sharing one x axis; its numbers travel as two buffers. */
export interface IBlock {
  names: string[];
  count: number;
  dropped?: number;
}

export interface IStreamStats {
  messages: number;
  points: number;
  errors: { [site: string]: number };
}

export interface ISnapshot {
  method: 'snapshot';
  seq: number;
  blocks: IBlock[];
  truncated?: boolean;
  stats: IStreamStats;
}

export interface ISeries {
  method: 'series';
  seq: number;
  blocks: IBlock[];
}

export interface IAck {
  method: 'ack';
  request_id: string;
  action: string;
  result: { [key: string]: unknown };
  duplicate?: boolean;
}

export type ErrorCode =
  | 'protocol_mismatch'
  | 'malformed'
  | 'unknown_action'
  | 'invalid_args'
  | 'refused'
  | 'failed';

export interface IError {
  method: 'error';
  request_id: string | null;
  code: ErrorCode;
  message: string;
  duplicate?: boolean;
}

export type KernelMessage = IHello | ISnapshot | ISeries | IAck | IError;

export interface IOpen {
  method: 'open';
  protocol_version: string;
  client?: string;
}

/** Argument types of every allowlisted action. */
export interface IActionArgs {
  snapshot: Record<string, never>;
  clear_history: { names?: string[] };
}

export type ActionName = keyof IActionArgs;

export interface IAction<K extends ActionName = ActionName> {
  method: 'action';
  request_id: string;
  action: K;
  args: IActionArgs[K];
}

export type PanelMessage = IOpen | IAction;

/** Decode a wire number. */
export function wireNumber(v: WireNumber | null | undefined): number {
  if (typeof v === 'number') {
    return v;
  }
  switch (v) {
    case 'Infinity':
      return Infinity;
    case '-Infinity':
      return -Infinity;
    default:
      return NaN;
  }
}
