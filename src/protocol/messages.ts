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

/**
 * A group of series sharing one x axis; its numbers travel as two buffers
 * (x float64, y float32 row-major). In a `series` message `names` comes only
 * the first time a block id goes out: the panel keeps an id -> names table.
 */
export interface IBlock {
  /** Never reused while the kernel side is loaded. */
  id: number;
  /** Present the first time the id goes out, and always in a snapshot. */
  names?: string[];
  count: number;
  dropped?: number;
}

/** A snapshot block: always with its names (the whole name table). */
export interface ISnapshotBlock extends IBlock {
  names: string[];
}

export interface IStreamStats {
  messages: number;
  points: number;
  errors: { [site: string]: number };
}

export interface ISnapshot {
  method: 'snapshot';
  seq: number;
  blocks: ISnapshotBlock[];
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

// --- memory -------------------------------------------------------------------

export type Bytes = number | null;

export interface IAllocatorCounters {
  allocated: Bytes;
  reserved: Bytes;
  peak: Bytes;
  active: Bytes;
  inactive_split: Bytes;
  alloc_retries: number | null;
  ooms: number | null;
}

export interface INvmlFields {
  used?: Bytes;
  total?: Bytes;
  util_gpu?: number | null;
  util_memory?: number | null;
  temperature_c?: number | null;
  power_w?: number | null;
  power_limit_w?: number | null;
  process_used?: Bytes;
}

export interface IMemoryDevice {
  device: string;
  index: number;
  name: string | null;
  uuid: string | null;
  nvml_index: number | null;
  matched_by: string | null;
  mig: boolean | null;
  series: { [key: string]: string };
  allocator: IAllocatorCounters | null;
  allocator_reason: string | null;
  nvml: INvmlFields | null;
  nvml_reason: string | null;
  unavailable: { [field: string]: string };
}

export interface IMemoryBreakdownRow {
  device: string;
  parameters: number;
  gradients: number;
  optimizer_state: number;
  other: Bytes;
  total: Bytes;
  total_source: 'allocated' | 'rss' | null;
}

/** Where memory was allocated (the first frame outside torch and the stdlib). */
export interface IAllocationSite {
  file: string;
  line: number;
  function: string;
  bytes: number;
  count: number;
}

/** What `record_memory` `stop` wrote and found (also its ack `result`). */
export interface IMemorySnapshotSummary {
  time: number;
  /** The snapshot pickle in the kernel's working directory (plain file name). */
  file: string;
  bytes: number;
  entries: number;
  oom_events: number;
  /** Every allocation while recording, largest total first (at most 10). */
  top_sites: IAllocationSite[];
  /** Still allocated at the stop, largest first (at most 10). */
  live_sites: IAllocationSite[];
}

export interface IMemory {
  method: 'memory';
  time: number;
  state: 'waiting' | 'no_cuda' | 'cuda_idle' | 'active' | 'corrupted';
  reason: string | null;
  devices: IMemoryDevice[];
  host: { rss: Bytes; reason: string | null; series: string };
  breakdown: {
    devices: IMemoryBreakdownRow[];
    models: string[];
    optimizers: string[];
    tensors: number;
    truncated: boolean;
    reason: string | null;
    cost_ms: number;
    time?: number;
    /** Parameters left out: trained on another thread (R34). */
    skipped_grads?: number;
    note?: string;
  } | null;
  recording: {
    state: 'off' | 'armed' | 'on';
    max_entries: number | null;
    since: number | null;
    /** The summary of the last recording stopped (null before the first stop). */
    last?: IMemorySnapshotSummary | null;
  };
  last_oom: {
    id: string;
    time: number;
    device: string;
    headline: string;
  } | null;
  nvml: { available: boolean; reason: string | null };
}

export interface IOomTensor {
  name: string;
  also: string[];
  kind: string;
  where: 'namespace' | 'frame';
  function: string | null;
  lineno: number | null;
  shape: number[];
  dtype: string;
  device: string;
  nbytes: number;
  requires_grad: boolean;
  grad_fn: boolean;
}

export interface IOomRemedy {
  kind: string;
  title: string;
  detail: string;
  code: string | null;
  share: number | null;
}

export interface IOom {
  method: 'oom';
  id: string;
  time: number;
  replay: boolean;
  exception_id: string | null;
  exception: { type: string; message: string };
  device: string;
  headline: string;
  requested_bytes: Bytes;
  numbers: { [key: string]: Bytes | string };
  breakdown: IMemoryBreakdownRow;
  tensors: IOomTensor[];
  tensors_total: number;
  tensors_bytes: number;
  summary: string | null;
  summary_truncated: boolean;
  remedies: IOomRemedy[];
  [key: string]: unknown;
}

/** Training control state: clip level, pause, learning-rate scale. */
export interface IControl {
  method: 'control';
  clip: number | null;
  paused: boolean;
  paused_at: number | null;
  step: number;
  lr_scale: number | null;
  optimizers: string[];
  last_refusal: string | null;
}

export type KernelMessage =
  | IHello
  | ISnapshot
  | ISeries
  | IAck
  | IError
  | IGrads
  | IAlert
  | IException
  | IControl
  | IMemory
  | IOom;

export interface IOpen {
  method: 'open';
  protocol_version: string;
  client?: string;
}

/** Argument types of every allowlisted action. */
export interface IActionArgs {
  snapshot: Record<string, never>;
  clear_history: { names?: string[] };
  set_stride: { stride: number | 'auto' | 'off' };
  set_thresholds: Partial<IGradThresholds>;
  clear_alerts: Record<string, never>;
  clip: { max_norm: number };
  unclip: Record<string, never>;
  pause: Record<string, never>;
  resume: Record<string, never>;
  step: Record<string, never>;
  scale_lr: { factor: number };
  reset_lr: Record<string, never>;
  empty_cache: Record<string, never>;
  release_refs: Record<string, never>;
  record_memory: { op: 'start'; max_entries?: number } | { op: 'stop' };
  save_checkpoint: { filename?: string; overwrite?: boolean };
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

// --- gradient monitor -------------------------------------------------------

export interface IGradThresholds {
  explode_abs: number | null;
  explode_factor: number;
  explode_warmup: number;
  vanish_floor: number;
  vanish_ratio: number;
  vanish_steps: number;
  amp_skips: number;
  amp_min_scale: number;
}

export interface IGradLayer {
  name: string;
  series: string;
  param_series: string;
  numel: number;
  params: { name: string; shape: number[]; dtype: string }[];
  more_params?: number;
}

export interface IGradStats {
  last: WireNumber[];
  max: (number | null)[];
  min: (number | null)[];
  nonfinite: number[];
}

export interface IGradTrack {
  name: string;
  state: 'waiting' | 'active' | 'disabled' | 'no_grads';
  reason: string | null;
  step: number;
  sampled: number;
  mode: 'auto' | 'fixed' | 'off';
  stride: number;
  /** Why it samples every step now (auto warm-up, norm climbing, clipping). */
  every_step?: 'warmup' | 'rising' | 'clip' | null;
  overhead: number | null;
  step_time_s: number | null;
  sample_cost_s: number | null;
  skipped_steps: number;
  skipped_at?: number[];
  amp_scale: WireNumber | null;
  local_shard: boolean;
  coarsened: boolean;
  total_series: string;
  scale_series: string | null;
  layers_version: number;
  layers?: IGradLayer[];
  stats?: IGradStats;
}

export interface IGrads {
  method: 'grads';
  state: 'waiting' | 'active' | 'off';
  reason: string | null;
  mode: 'auto' | 'fixed' | 'off';
  stride: number | null;
  budget: number;
  thresholds: IGradThresholds;
  alerts: number;
  tracks: IGradTrack[];
}

export interface IAlertItem {
  id: string;
  source: string;
  kind:
    | 'non_finite'
    | 'non_finite_forward'
    | 'explosion'
    | 'vanishing'
    | 'amp_skips'
    | 'amp_scale_collapse';
  severity: 'warning' | 'error';
  step: number;
  layer: string | null;
  message: string;
  remedy: string;
  track: string;
  value: WireNumber | null;
  time: number;
}

export interface IAlert {
  method: 'alert';
  alerts: IAlertItem[];
  replay?: boolean;
}

// --- exceptions -------------------------------------------------------------

export interface ILocal {
  name?: string;
  kind: string;
  type: string;
  text: string;
  shape?: (number | string)[] | 'n/a';
  dtype?: string;
  device?: string;
  requires_grad?: boolean | string;
  grad?: boolean | string;
  finite?: boolean | null;
  items?: ILocal[];
  [key: string]: unknown;
}

export interface IExceptionFrame {
  position: number;
  origin: 'cell' | 'file' | 'library';
  user: boolean;
  function: string;
  file: string;
  path?: string;
  lineno: number;
  cell_id?: string | null;
  execution_count?: number | null;
  source_changed?: boolean;
  line: string;
  source?: { first: number; lines: string[] };
  namespace?: boolean;
  locals: ILocal[];
  locals_total: number;
  locals_truncated: boolean;
}

export interface IRelatedException {
  relation?: 'cause' | 'context';
  type: string;
  module: string;
  message: string;
  message_truncated: boolean;
}

export interface IDiagnosis {
  category: string;
  title: string;
  headline: string;
  culprits: (ILocal & { frame?: number; role?: string; named?: boolean })[];
  remedy: string | null;
  hints: string[];
  facts: { [key: string]: unknown };
  confidence: 'certain' | 'likely';
  links: ('memory' | 'grads')[];
  where: number | null;
}

export interface IException {
  method: 'exception';
  id: string;
  time: number;
  replay: boolean;
  execution_count: number | null;
  cell_id: string | null;
  debuggable: boolean;
  exception: {
    type: string;
    module: string;
    message: string;
    message_truncated: boolean;
    message_unavailable?: boolean;
  };
  diagnosis: IDiagnosis;
  frames: IExceptionFrame[];
  focus: number | null;
  frames_total: number;
  elided: { after: number; count: number; reason: 'repeated' | 'limit' }[];
  chain: IRelatedException[];
  group?: IRelatedException[];
  truncated: boolean;
  capture_ms?: number;
}
