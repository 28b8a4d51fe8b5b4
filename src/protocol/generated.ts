/**
 * GENERATED FILE, DO NOT EDIT.
 *
 * The protocol's message types, generated from jupyterlab_torchdbg/protocol/messages.schema.json
 * by scripts/gen-protocol-types.mjs (json-schema-to-typescript). Change the schema,
 * then run `jlpm gen:protocol`; `jlpm gen:protocol:check` fails when this file is stale.
 * Import from `./messages`, which re-exports these under the panel's names.
 */

/**
 * Every JSON message exchanged on the `jupyterlab_torchdbg` comm, in both directions. Binary payloads travel as comm buffers described by the `blocks` of a message. See PROTOCOL.md beside this file.
 */
export type ProtocolMessage = KernelMessage | PanelMessage;
/**
 * Kernel -> panel.
 */
export type KernelMessage =
  | IHello
  | ISnapshot
  | ISeries
  | IAck
  | IError
  | IException
  | IGrads
  | IAlert
  | IMemory
  | IOom
  | IControl
  | IRuns
  | IRanks
  | ILoaded
  | IRecord
  | IRecordRunData;
export type ProtocolVersion = string;
/**
 * A block in a snapshot: always with its names (the snapshot carries the whole name table).
 */
export type ISnapshotBlock = IBlock & Required<Pick<IBlock, 'names'>>;
export type RequestId = string;
/**
 * A number, a non-finite number spelled as a string, or null (not known yet).
 */
export type NullableNumber = FiniteOrSpecial | null;
/**
 * A number. JSON has no NaN or infinities, so those travel as the strings below.
 */
export type FiniteOrSpecial = number | ('NaN' | 'Infinity' | '-Infinity');
/**
 * A byte count; null when not known (an `unavailable` or `*_reason` field says why).
 */
export type Bytes = number | null;
/**
 * Panel -> kernel.
 */
export type PanelMessage = IOpen | IAction;
/**
 * A request from the panel. `action` comes from an allowlist; each action has its own argument schema. Exactly one `ack` or `error` answers each request id.
 */
export type IAction = IActionEnvelope & ActionVariant;
/**
 * One allowlisted action with its own argument schema.
 */
export type ActionVariant =
  | IActionSnapshot
  | IActionClearHistory
  | IActionSetStride
  | IActionSetThresholds
  | IActionClearAlerts
  | IActionReplayStep
  | IActionSkipNonfinite
  | IActionEmptyCache
  | IActionReleaseRefs
  | IActionRecordMemory
  | IActionSaveCheckpoint
  | IActionClip
  | IActionUnclip
  | IActionPause
  | IActionResume
  | IActionStep
  | IActionScaleLr
  | IActionResetLr
  | IActionSetLr
  | IActionRanksClip
  | IActionRanksUnclip
  | IActionRanksPause
  | IActionRanksResume
  | IActionRanksScaleLr
  | IActionSetMemoryGuard
  | IActionMeasureActivations
  | IActionOpenRecord
  | IActionDismissRecord
  | IActionExportTensorboard;
export type NoArgs = Record<string, never>;

/**
 * The first message on every comm. `accepted` is false on a protocol major-version mismatch; an `error` with code `protocol_mismatch` follows and the kernel closes the comm.
 */
export interface IHello {
  method: 'hello';
  protocol_version: ProtocolVersion;
  package_version: string;
  capabilities: ICapabilities;
  /**
   * Random per extension load: a new id means the kernel side was reloaded or restarted.
   */
  session_id: string;
  accepted: boolean;
  /**
   * The action names this kernel accepts.
   */
  actions?: string[];
}
export interface ICapabilities {
  torch: IAvailability;
  cuda: ICudaCapability;
  nvml: IAvailability;
  /**
   * The kernel handles comm messages on a subshell thread, so actions apply while a cell runs.
   */
  subshells: boolean;
  tensorboard?: IAvailability;
  [k: string]: unknown;
}
export interface IAvailability {
  available: boolean;
  version?: string | null;
  reason?: string | null;
  [k: string]: unknown;
}
export interface ICudaCapability {
  /**
   * null when it cannot be known without initialising CUDA.
   */
  available: boolean | null;
  initialized: boolean;
  device_count?: number | null;
  version?: string | null;
  reason?: string | null;
  [k: string]: unknown;
}
/**
 * Sent to one comm on open and on request: the downsampled history of every series, the current sequence number, and stream statistics.
 */
export interface ISnapshot {
  method: 'snapshot';
  seq: number;
  blocks: ISnapshotBlock[];
  /**
   * Some series were left out because of the series cap.
   */
  truncated?: boolean;
  stats: IStreamStats;
}
/**
 * A group of series sharing one x axis, known by `id`. Buffers, in block order: x as float64 little-endian (`count` values), then y as float32 little-endian (`count` x len(names) values, row-major: for each x, one value per name). In a `series` message `names` is present only the first time the block goes out; the panel keeps an id -> names table (replaced by each snapshot, whose blocks all carry `names`). A block's names never change; new names get a new id.
 */
export interface IBlock {
  /**
   * The block's id, never reused while the kernel side is loaded (a new hello session_id starts a new table).
   */
  id: number;
  /**
   * @minItems 1
   */
  names?: string[];
  count: number;
  /**
   * Points recorded but not sent because the pending buffer was full (the panel marks a gap).
   */
  dropped?: number;
  /**
   * The run whose points the block holds (see `runs`). Absent: recorded outside any run. A new run gives the log() series and each gradient track new block ids.
   */
  run?: number;
}
export interface IStreamStats {
  messages: number;
  points: number;
  /**
   * Errors the tool caught inside its own hooks and senders, by site (never raised into user code).
   */
  errors: {
    [k: string]: number;
  };
  [k: string]: unknown;
}
/**
 * New points since the previous flush, broadcast to every comm at most 10 times a second. `seq` increases by one per message; a gap means a message was lost.
 */
export interface ISeries {
  method: 'series';
  seq: number;
  blocks: IBlock[];
}
export interface IAck {
  method: 'ack';
  request_id: RequestId;
  action: string;
  result: {
    [k: string]: unknown;
  };
  /**
   * This request id was seen before; the action was not applied again.
   */
  duplicate?: boolean;
}
export interface IError {
  method: 'error';
  request_id: RequestId | null;
  code:
    | 'protocol_mismatch'
    | 'malformed'
    | 'unknown_action'
    | 'invalid_args'
    | 'refused'
    | 'failed';
  message: string;
  duplicate?: boolean;
}
/**
 * Broadcast to every comm when a cell fails (never for KeyboardInterrupt, SystemExit, BdbQuit, UsageError). Also sent once to a (re)connecting comm after its snapshot with `replay: true`: the panel shows it without popping up (compare `id`/`time`). Strings only: no frames or tensors are kept by the kernel side.
 */
export interface IException {
  method: 'exception';
  /**
   * Unique per kernel-side session: `<session>-<n>`.
   */
  id: string;
  /**
   * Unix time (seconds) of the capture.
   */
  time: number;
  /**
   * true when re-sent on connect or snapshot: do not pop up.
   */
  replay: boolean;
  execution_count: number | null;
  /**
   * The failing cell (JupyterLab's cell id), null when the client sent none.
   */
  cell_id: string | null;
  /**
   * `sys.last_value` is this exception, so `%debug` lands on it.
   */
  debuggable: boolean;
  exception: IExceptionInfo;
  diagnosis: IDiagnosis;
  /**
   * Outermost first, as a Python traceback. Gaps are listed in `elided`.
   */
  frames: IExceptionFrame[];
  /**
   * Index in `frames` of the innermost user frame (cell or user file); null if none.
   */
  focus: number | null;
  /**
   * Frames in the whole stack.
   */
  frames_total: number;
  elided: {
    /**
     * Index in `frames` of the frame before the gap.
     */
    after: number;
    count: number;
    /**
     * `repeated`: the frame before the gap, repeated (recursion).
     */
    reason: 'repeated' | 'limit';
  }[];
  /**
   * `__cause__`/`__context__` links from the raised exception downwards (cycle-safe, bounded).
   */
  chain: IRelatedException[];
  /**
   * Leaves of an ExceptionGroup (nested groups flattened; `path` gives the position).
   */
  group?: IRelatedException[];
  /**
   * Something was cut to bound the message (frames, message text, locals, source).
   */
  truncated: boolean;
  capture_ms?: number;
  rank?: IRankIdentity;
  unwrapped?: IUnwrappedError;
}
export interface IExceptionInfo {
  type: string;
  module: string;
  /**
   * str(exception), cut to 10,000 characters; "n/a" when its __str__ raised.
   */
  message: string;
  message_truncated: boolean;
  message_unavailable?: boolean;
  /**
   * For a SyntaxError: where the parser stopped.
   */
  syntax?: {
    lineno?: number | null;
    offset?: number | null;
    end_lineno?: number | null;
    end_offset?: number | null;
    text?: string | null;
    msg?: string | null;
    file?: string;
    origin?: 'cell' | 'file' | 'library';
    cell_id?: string | null;
    execution_count?: number | null;
    [k: string]: unknown;
  };
}
export interface IDiagnosis {
  category:
    | 'device_mismatch'
    | 'shape_mismatch'
    | 'dtype_mismatch'
    | 'index_out_of_range'
    | 'out_of_memory'
    | 'inplace_modification'
    | 'device_side_assert'
    | 'cuda_error'
    | 'autograd'
    | 'non_finite'
    | 'data_loader'
    | 'generic';
  title: string;
  /**
   * One sentence; code in backticks (render as text, S1).
   */
  headline: string;
  /**
   * Variables, layers or parameters involved: a Local plus `frame` (index in `frames`), `role`; library arguments not bound to a user name have `named: false`.
   */
  culprits: (ILocal & {
    frame?: number;
    role?: string;
    arg?: string;
    named?: boolean;
    [k: string]: unknown;
  })[];
  /**
   * The main fix in plain words; null for the generic view.
   */
  remedy: string | null;
  hints: string[];
  /**
   * Numbers behind the headline (e.g. lengths [100, 90], requested_bytes, n_classes).
   */
  facts: {
    [k: string]: unknown;
  };
  confidence: 'certain' | 'likely';
  /**
   * Other panels with related data.
   */
  links: ('memory' | 'grads')[];
  /**
   * Index in `frames` to show first (the focus frame).
   */
  where: number | null;
}
/**
 * One local, from metadata only. Any field may be "n/a" when reading it raised. `text` is a ready one-line rendering.
 */
export interface ILocal {
  name?: string;
  kind:
    | 'tensor'
    | 'module'
    | 'optimizer'
    | 'dataset'
    | 'dataloader'
    | 'array'
    | 'number'
    | 'string'
    | 'bytes'
    | 'none'
    | 'container'
    | 'object'
    | 'function'
    | 'class'
    | 'pymodule';
  type: string;
  text: string;
  shape?: (number | string)[] | 'n/a';
  dtype?: string;
  device?: string;
  layout?: string;
  requires_grad?: boolean | string;
  is_leaf?: boolean | string;
  /**
   * A .grad is present.
   */
  grad?: boolean | string;
  /**
   * null: not checked (only small dense CPU tensors are).
   */
  finite?: boolean | null;
  min?: number | string;
  max?: number | string;
  version?: number | string;
  nbytes?: number | string;
  params?: number | string;
  devices?: string[] | 'n/a';
  dtypes?: string[] | 'n/a';
  len?: number | string;
  items?: ILocal[];
  [k: string]: unknown;
}
export interface IExceptionFrame {
  /**
   * Index in the whole stack (0 = outermost).
   */
  position: number;
  /**
   * A notebook cell, a user file, or an installed package / the standard library.
   */
  origin: 'cell' | 'file' | 'library';
  /**
   * origin is cell or file.
   */
  user: boolean;
  function: string;
  /**
   * For display only: `Cell In[5]`, a path relative to the kernel's cwd, or a library path relative to its sys.path entry. Never a home directory.
   */
  file: string;
  /**
   * User files under the kernel's cwd: the path relative to it (to open through the file browser).
   */
  path?: string;
  /**
   * For a cell frame: the line in that cell (1-based).
   */
  lineno: number;
  cell_id?: string | null;
  execution_count?: number | null;
  /**
   * The cell has run different code since this frame's code was compiled.
   */
  source_changed?: boolean;
  /**
   * The source line, stripped (compare with the cell's current text to detect an edit).
   */
  line: string;
  source?: {
    first: number;
    lines: string[];
    [k: string]: unknown;
  };
  /**
   * The failing expression: lines 1-based, columns as UTF-8 byte offsets (end_col -1 = unknown).
   */
  span?: {
    start_line?: number;
    end_line?: number;
    start_col?: number;
    end_col?: number;
    [k: string]: unknown;
  };
  /**
   * Module level: the locals are the notebook's globals (IPython's own names, imports, functions and classes left out).
   */
  namespace?: boolean;
  /**
   * The frame ran in another process (`DataLoader worker process 0`) and is known from its traceback's text: no locals.
   */
  process?: string;
  locals: ILocal[];
  locals_total: number;
  locals_truncated: boolean;
  [k: string]: unknown;
}
export interface IRelatedException {
  relation?: 'cause' | 'context';
  path?: number[];
  type: string;
  module: string;
  message: string;
  message_truncated: boolean;
  message_unavailable?: boolean;
  where?: {
    file: string;
    lineno: number;
    function: string;
    cell_id?: string | null;
    [k: string]: unknown;
  };
  [k: string]: unknown;
}
/**
 * Present when a worker process raised: which rank. `cell_id` is then the notebook cell that started the job, when known, and `debuggable` is false.
 */
export interface IRankIdentity {
  rank: number;
  world_size: number;
  local_rank: number | null;
  host: string;
  pid: number;
  /**
   * How the worker attached: started by torch.multiprocessing spawn from the notebook, forked from the kernel, a torchrun (or other) subprocess that inherited the endpoint, or jupyterlab_torchdbg.attach() in a script started elsewhere.
   */
  launcher: 'spawn' | 'fork' | 'torchrun' | 'attach';
}
/**
 * Present when a DataLoader's dataset raised: the original error (re-raised by torch from a worker process as text), where it ran and which sample.
 */
export interface IUnwrappedError {
  /**
   * `DataLoader worker process N`, or `the main process` (num_workers=0).
   */
  where: string;
  worker_id: number | null;
  /**
   * The worker process, when it noted the sample (the worker is another process: its frames have no locals).
   */
  pid: number | null;
  exception: IExceptionInfo1;
  /**
   * True only when the fetcher's own `dataset[idx]` call was on the traceback: `index` is the index it passed.
   */
  index_known: boolean;
  /**
   * The failing sample's index as the sampler gave it: an integer, a string, a short list, or `{type}` for anything else; null when not known.
   */
  index:
    | number
    | string
    | unknown[]
    | {
        [k: string]: unknown;
      }
    | null;
  /**
   * The batch's indices (the first 64) when the DataLoader batches.
   *
   * @maxItems 64
   */
  batch: unknown[] | null;
  batch_size: number | null;
  /**
   * The type name of the DataLoader's dataset.
   */
  dataset: string | null;
  /**
   * Index in `frames` of the dataset's `__getitem__` (else the innermost frame of the worker).
   */
  frame: number | null;
  /**
   * Why the index is not known (when `index_known` is false).
   */
  why_unknown: string | null;
}
/**
 * The original exception: its own type, module and message (not torch's "Caught X in DataLoader worker process N").
 */
export interface IExceptionInfo1 {
  type: string;
  module: string;
  /**
   * str(exception), cut to 10,000 characters; "n/a" when its __str__ raised.
   */
  message: string;
  message_truncated: boolean;
  message_unavailable?: boolean;
  /**
   * For a SyntaxError: where the parser stopped.
   */
  syntax?: {
    lineno?: number | null;
    offset?: number | null;
    end_lineno?: number | null;
    end_offset?: number | null;
    text?: string | null;
    msg?: string | null;
    file?: string;
    origin?: 'cell' | 'file' | 'library';
    cell_id?: string | null;
    execution_count?: number | null;
    [k: string]: unknown;
  };
}
/**
 * The gradient monitor's status: sent on changes and every ~2 s while training, in every snapshot, and at the end of a cell. The numbers themselves travel in `series` messages.
 */
export interface IGrads {
  method: 'grads';
  state: 'waiting' | 'active' | 'off';
  reason: string | null;
  mode: 'auto' | 'fixed' | 'off';
  stride: number | null;
  /**
   * Share of step time the automatic stride aims at.
   */
  budget: number;
  thresholds: IGradThresholds;
  /**
   * Alerts raised in the current run (the last run when idle).
   */
  alerts: number;
  tracks: IGradTrack[];
  /**
   * The skip_nonfinite action's setting (every optimizer, also those that start stepping later); a track's own `skip_nonfinite` also counts watch(skip_nonfinite=True).
   */
  skip_nonfinite?: boolean;
  /**
   * The non-finite step kept for replay_step (the newest), or null.
   */
  replayable?: null | {
    track: string;
    step: number;
  };
  /**
   * Alerts raised since load.
   */
  alerts_total?: number;
}
/**
 * Alarm settings of the gradient monitor (see `set_thresholds`).
 */
export interface IGradThresholds {
  /**
   * Total norm above this is an explosion (default 1e12); null: only the relative rules.
   */
  explode_abs: number | null;
  /**
   * Total norm above this many times its running median is an explosion.
   */
  explode_factor: number;
  /**
   * Sampled steps before the running-median rule applies; until then a total above 100x the first steps' level is an explosion (from the second sampled step).
   */
  explode_warmup: number;
  /**
   * A layer norm below this (and above 0) counts as vanishing...
   */
  vanish_floor: number;
  /**
   * ...as does one below this fraction of the total norm...
   */
  vanish_ratio: number;
  /**
   * ...for this many consecutive sampled steps.
   */
  vanish_steps: number;
  /**
   * GradScaler skips within 100 optimizer steps that raise an alarm.
   */
  amp_skips: number;
  /**
   * A GradScaler scale below this has collapsed.
   */
  amp_min_scale: number;
}
/**
 * One optimizer seen at the step boundary. Its rows arrive in `series` messages as one block: `total_series`, then each layer's `series`, then `scale_series` when GradScaler drives it. `layers` is sent when `layers_version` changes (and in every snapshot); otherwise keep the previous list.
 */
export interface IGradTrack {
  /**
   * The optimizer's variable name (for an end_of_backward track: the model's).
   */
  name: string;
  /**
   * Where the track's steps are read: before each optimizer.step(), or at the end of each backward pass of a model no optimizer steps (a loop that updates the weights by hand; learning-rate scaling does not apply). Absent: optimizer_step.
   */
  boundary?: 'optimizer_step' | 'end_of_backward';
  /**
   * disabled: outside the watched scope; no_grads: no parameter had a gradient at the last sampled step.
   */
  state: 'waiting' | 'active' | 'disabled' | 'no_grads';
  reason: string | null;
  /**
   * Optimizer steps taken (GradScaler-skipped steps excluded).
   */
  step: number;
  sampled: number;
  mode: 'auto' | 'fixed' | 'off';
  /**
   * Current sampling stride (1 while `every_step` says why).
   */
  stride: number;
  /**
   * Why a track that would sample every N steps samples every step now: the auto mode's warm-up (first steps of a run), the total norm climbing towards the explosion alarm, the clip action (which reads every step's norms anyway), or skipping non-finite steps (which needs every step's norms). null: it follows `stride`.
   */
  every_step?: 'warmup' | 'rising' | 'clip' | 'skip' | null;
  /**
   * Measured cost of monitoring as a share of step time (0.01 = 1%).
   */
  overhead: number | null;
  step_time_s: number | null;
  /**
   * Same as `read_cost_s` (kept for older panels).
   */
  sample_cost_s: number | null;
  /**
   * Running cost of one read of the gradients, in seconds: the only cost the auto stride is chosen from (`overhead` is it spread over the stride).
   */
  read_cost_s?: number | null;
  /**
   * Running cost of one weight-norm read (about once a second; less often when dear). Periodic work, not billed to the stride.
   */
  param_cost_s?: number | null;
  /**
   * Share of step time the read may cost in auto mode (0.01 = 1%).
   */
  budget?: number;
  /**
   * Why the track samples as it does, in words built by the kernel, e.g. 'every 20th step: a read costs 0.31 ms, a step 25 ms, budget 1%'.
   */
  stride_reason?: string;
  /**
   * Running cost of one pass of the monitor's periodic work (flush, alarm checks, status), in seconds; monitor-wide. Paid from its own budget by flushing less often, never by the stride.
   */
  periodic_cost_s?: number | null;
  /**
   * Share of wall time that periodic work took over the last measured window (monitor-wide; null until measured).
   */
  periodic_share?: number | null;
  /**
   * The stream's flush interval now: its own, lengthened (up to 10x) while periodic work is over its budget.
   */
  flush_interval_s?: number | null;
  /**
   * Steps GradScaler skipped (shown as 'skipped step', not an alarm).
   */
  skipped_steps: number;
  /**
   * Optimizer steps with NaN/Inf gradients are skipped (the skip_nonfinite action or a watch's option).
   */
  skip_nonfinite?: boolean;
  /**
   * Optimizer steps skipped because their gradients were NaN/Inf.
   */
  skipped_nonfinite?: number;
  /**
   * The steps at which the skips were seen (the latest 100).
   *
   * @maxItems 100
   */
  skipped_at?: number[];
  amp_scale: NullableNumber;
  /**
   * Norms are of this process's shard only (FSDP/DTensor).
   */
  local_shard: boolean;
  /**
   * Too many layers: merged into their parent modules.
   */
  coarsened: boolean;
  total_series: string;
  scale_series: string | null;
  layers_version: number;
  /**
   * @maxItems 512
   */
  layers?: IGradLayer[];
  stats?: IGradStats;
  /**
   * The run the track belongs to; `step` counts steps within that run.
   */
  run?: number;
}
/**
 * One layer (module) of a monitored optimizer. `series` names its gradient-norm series, `param_series` its weight-norm series (sampled at most once a second).
 */
export interface IGradLayer {
  name: string;
  series: string;
  param_series: string;
  numel: number;
  /**
   * @maxItems 32
   */
  params: {
    name: string;
    shape: number[];
    dtype: string;
  }[];
  /**
   * Parameters of this layer not listed in `params`.
   */
  more_params?: number;
}
/**
 * Per series, total first then the layers in `layers` order: the last value, the largest and smallest finite values (null: none finite yet), and how many sampled values were NaN/Inf.
 */
export interface IGradStats {
  last: FiniteOrSpecial[];
  max: (number | null)[];
  min: (number | null)[];
  nonfinite: number[];
}
/**
 * New alarms, coalesced (at most two messages a second). In a snapshot the recent ones come again with `replay: true`: list them, do not pop up.
 */
export interface IAlert {
  method: 'alert';
  /**
   * @minItems 1
   * @maxItems 100
   */
  alerts: IAlertItem[];
  replay?: boolean;
}
/**
 * One alarm: what, where (step, layer), and a one-line remedy.
 */
export interface IAlertItem {
  id: string;
  /**
   * The feature that raised it, e.g. `grads`.
   */
  source: string;
  /**
   * divergence: the logged loss (a series whose name contains `loss`) jumped far above its first values (x100) while no gradient alarm told the story, or the total gradient norm held far above its level (x10 for 10 sampled steps), or the first updates of a run more than doubled the weights' norm. non_finite_cause: a non-finite gradient diagnosed at its step, before the optimizer applied it (its `cause`). non_finite_forward: the forward probe's finding on the forward pass after a non_finite alarm, when the step could not be checked (CUDA without skip_nonfinite; the weights may already be updated). non_finite_skipped: skip_nonfinite began skipping steps. non_finite_replay: a replay_step's finding (its `replay`). memory_leak: memory grows steadily with the step count (`memory.leak` names the holders). memory_limit: the memory guard paused training before the limit.
   */
  kind:
    | 'non_finite'
    | 'non_finite_forward'
    | 'explosion'
    | 'vanishing'
    | 'amp_skips'
    | 'amp_scale_collapse'
    | 'non_finite_replay'
    | 'non_finite_cause'
    | 'non_finite_skipped'
    | 'divergence'
    | 'memory_leak'
    | 'memory_limit';
  /**
   * non_finite_cause only: the batch holds NaN/Inf (`layer`: the root), a module's forward turns finite inputs into NaN/Inf (`layer`: that module), a module's weights were already non-finite, the loss (what `backward()` was called on, or a loss module's output, or the logged loss) is non-finite on finite outputs (`layer`: the loss module or the root model whose own loss it is, or null), forward and loss are both checked finite and backward made it (`layer`: the layer nearest the loss with a non-finite gradient), the gradient values are finite but their float32 norm overflows (exploded gradients), or unchecked: what made it was not established because something was not checked (the step's batch was not kept, or the loss was not seen); the message says what was and was not checked.
   */
  cause?:
    | 'input'
    | 'forward'
    | 'weights'
    | 'loss'
    | 'backward'
    | 'overflow'
    | 'unchecked';
  replay?: IReplayResult;
  severity: 'warning' | 'error';
  /**
   * The step within the run (`run`).
   */
  step: number;
  layer: string | null;
  message: string;
  remedy: string;
  /**
   * The optimizer (GradTrack name).
   */
  track: string;
  value: NullableNumber;
  /**
   * Unix time in seconds.
   */
  time: number;
  /**
   * The run it was raised in; `step` is the step within that run.
   */
  run?: number;
}
/**
 * non_finite_replay only: the replay's full result.
 */
export interface IReplayResult {
  step: number;
  track: string;
  /**
   * The root module replayed (its name in the namespace).
   */
  root?: string;
  /**
   * current: no pre-step copy was kept (over 512 MiB).
   */
  weights: 'pre-step' | 'current';
  /**
   * What backward started from: model (its own loss), loss_module:<name> (a loss module of the namespace on the output), surrogate (the sum of the outputs); null: no backward ran.
   */
  loss_root: string | null;
  /**
   * How `loss_root` relates to what `backward()` was called on at the bad step: same (that very loss), part (one term of it: the rest of the expression was not re-run), not_rerun (computed outside the model by code the replay cannot run), unseen (what backward() was called on was not seen).
   */
  user_loss?: 'same' | 'part' | 'not_rerun' | 'unseen';
  /**
   * true: the replay made NaN/Inf (or found it in the batch or weights); false: it ran the user's own loss and everything is finite; null: everything is finite but the user's loss was not re-run, so whether it reproduces was not checked.
   */
  reproduces?: boolean | null;
  cause: 'input' | 'weights' | 'forward' | 'backward' | 'overflow' | 'finite';
  /**
   * The autograd node, e.g. SqrtBackward0.
   */
  backward_op: string | null;
  /**
   * The node anomaly mode raised on (NaN only), when it differs.
   */
  anomaly_op?: string | null;
  /**
   * The torch function that first made NaN/Inf in the forward pass.
   */
  forward_op?: string | null;
  /**
   * Where the NaN/Inf is: out[0], out['logits'], loss, args[0], weights['fc.weight'].
   */
  output: string | null;
  /**
   * The user's frames of the forward call that made it, innermost last.
   *
   * @maxItems 12
   */
  forward_stack: {
    file: string;
    line: number;
    name: string;
    code: string;
    [k: string]: unknown;
  }[];
  finite: boolean;
  no_graph?: boolean;
  message: string;
  [k: string]: unknown;
}
/**
 * The memory panel's state: device cards, the breakdown, the recording. Sent when it changes (at most every 0.5 s while a cell runs, 1 s when idle), at the end of every cell, after a memory action, and in every snapshot. The timeline numbers travel in `series` messages under `mem/` (see `MemoryDevice.series` and `host.series`).
 */
export interface IMemory {
  method: 'memory';
  /**
   * Unix time in seconds.
   */
  time: number;
  /**
   * waiting: torch not imported; no_cuda: CPU-only torch or no visible device (show the CPU breakdown); cuda_idle: CUDA not initialised by the user's code yet (NVML cards only); active; corrupted: a sticky CUDA error, restart the kernel.
   */
  state: 'waiting' | 'no_cuda' | 'cuda_idle' | 'active' | 'corrupted';
  reason: string | null;
  devices: IMemoryDevice[];
  host: {
    rss: Bytes;
    reason: string | null;
    series: string;
  };
  breakdown: IMemoryBreakdown | null;
  recording: IMemoryRecording;
  /**
   * The latest `oom` autopsy (its full message is replayed after a snapshot).
   */
  last_oom: {
    id: string;
    time: number;
    device: string;
    headline: string;
  } | null;
  nvml: {
    available: boolean;
    reason: string | null;
  };
  leak?: IMemoryLeak | null;
  guard?: IMemoryGuard;
  activations?: IActivations | null;
}
/**
 * One CUDA device visible to this kernel (a card in the panel).
 */
export interface IMemoryDevice {
  /**
   * torch's name: `cuda:0`.
   */
  device: string;
  index: number;
  name: string | null;
  uuid: string | null;
  nvml_index: number | null;
  /**
   * How the NVML device was matched: `uuid` (certain), `visible_devices`/`pci_order` (CUDA_VISIBLE_DEVICES index or all devices, CUDA_DEVICE_ORDER=PCI_BUS_ID), `assumed_order` (CUDA may order devices differently until CUDA is initialised), null (no NVML device).
   */
  matched_by: 'uuid' | 'visible_devices' | 'pci_order' | 'assumed_order' | null;
  mig: boolean | null;
  /**
   * The `series` names of this device's timeline (x = Unix time in seconds).
   */
  series: {
    [k: string]: string;
  };
  allocator: IAllocatorCounters | null;
  allocator_reason: string | null;
  nvml: INvmlFields | null;
  nvml_reason: string | null;
  /**
   * NVML field -> why it is n/a (NotSupported, MIG, no permission, container).
   */
  unavailable: {
    [k: string]: string;
  };
  /**
   * How `series.peak_interval` is computed (the chart caption): exact where the all-time peak rose in the interval (`series.peak_exact` = 1), else the larger of the two sampled `allocated` values (0).
   */
  peak_note?: string;
}
/**
 * torch's caching allocator on one device (host-side counters). Bytes, except the two counts.
 */
export interface IAllocatorCounters {
  allocated: Bytes;
  reserved: Bytes;
  /**
   * A byte count; null when not known (an `unavailable` or `*_reason` field says why).
   */
  peak: number | null;
  active: Bytes;
  /**
   * A byte count; null when not known (an `unavailable` or `*_reason` field says why).
   */
  inactive_split: number | null;
  alloc_retries: number | null;
  ooms: number | null;
}
/**
 * NVML's view of one device. null = n/a; `MemoryDevice.unavailable` holds the reason.
 */
export interface INvmlFields {
  used?: Bytes;
  total?: Bytes;
  /**
   * Percent.
   */
  util_gpu?: number | null;
  /**
   * Percent.
   */
  util_memory?: number | null;
  temperature_c?: number | null;
  power_w?: number | null;
  power_limit_w?: number | null;
  /**
   * A byte count; null when not known (an `unavailable` or `*_reason` field says why).
   */
  process_used?: number | null;
}
export interface IMemoryBreakdown {
  /**
   * `cpu` first, then CUDA devices.
   */
  devices: IMemoryBreakdownRow[];
  /**
   * Models counted (namespace names; submodules of another model left out).
   */
  models: string[];
  optimizers: string[];
  tensors: number;
  truncated: boolean;
  /**
   * Why the categories are empty (no model or optimizer found).
   */
  reason: string | null;
  /**
   * Parameters whose gradients (and optimizers whose state) were not read because another thread trains them (R34).
   */
  skipped_grads?: number;
  /**
   * Why some categories are incomplete (training on several threads).
   */
  note?: string;
  cost_ms: number;
  time?: number;
}
/**
 * Where one device's memory went. Each storage counted once, in the first category reaching it. `other` = `total` minus the three categories (activations, data, caches); null when `total` is unknown.
 */
export interface IMemoryBreakdownRow {
  device: string;
  /**
   * Parameters and module buffers.
   */
  parameters: number;
  gradients: number;
  optimizer_state: number;
  other: Bytes;
  total: Bytes;
  /**
   * `allocated`: the CUDA allocator's allocated bytes; `rss`: the process's resident memory (CPU row).
   */
  total_source: 'allocated' | 'rss' | null;
}
export interface IMemoryRecording {
  /**
   * `armed`: starts when the user's code first initialises CUDA.
   */
  state: 'off' | 'armed' | 'on';
  max_entries: number | null;
  since: number | null;
  /**
   * The summary of the last recording stopped in this session (null before the first stop).
   */
  last?: IMemorySnapshotSummary | null;
}
/**
 * What `record_memory` `stop` wrote and found: the snapshot `file` (a pickle in the kernel's working directory, for PyTorch's memory viewer), its size, the number of history `entries` and OOM events, and the top allocation sites by bytes, largest first: `top_sites` over every allocation recorded, `live_sites` still allocated at the stop. Also the fields of the stop's ack `result`.
 */
export interface IMemorySnapshotSummary {
  time: number;
  file: string;
  bytes: number;
  entries: number;
  oom_events: number;
  /**
   * @maxItems 10
   */
  top_sites: IAllocationSite[];
  /**
   * @maxItems 10
   */
  live_sites: IAllocationSite[];
}
/**
 * Where memory was allocated: the first frame outside torch and the standard library. `file` is the last two path components (no home directory); `file` and `function` are at most 200 characters. Render as text.
 */
export interface IAllocationSite {
  file: string;
  line: number;
  function: string;
  bytes: number;
  count: number;
}
/**
 * Memory growing steadily with the step count: a least-squares slope over the run's recent steps that stays clear of its noise (never a single jump), the holders found, and when the limit is reached at this rate.
 */
export interface IMemoryLeak {
  /**
   * The memory series the slope was fitted to (e.g. `mem/host/rss`).
   */
  series: string;
  counter: 'rss' | 'allocated' | 'reserved';
  /**
   * `cuda:N` for CUDA counters, null for the process RSS.
   */
  device: string | null;
  /**
   * Bytes per step (the fitted slope).
   */
  per_step: number;
  /**
   * The slope's standard error, bytes per step.
   */
  per_step_err: number;
  /**
   * Steps in the fit.
   */
  steps: number;
  run: number | null;
  step: number | null;
  used: Bytes;
  limit: Bytes;
  /**
   * cgroup: the kernel's cgroup memory.max; host: used + the host's MemAvailable; device: the CUDA device's total memory.
   */
  limit_source: 'cgroup' | 'host' | 'device' | null;
  /**
   * At this rate, steps until `used` reaches `limit`.
   */
  steps_left: number | null;
  /**
   * @maxItems 10
   */
  holders: ILeakHolder[];
  /**
   * The holder search: still to run (it runs off the step path), done, stopped by its time budget (the holders are those found so far), or failed (`search_note` says why).
   */
  search: 'pending' | 'done' | 'budget' | 'failed';
  search_note: string | null;
  /**
   * The headline, e.g. `RSS grows 2.1 MiB/step over 200 steps; at this rate the kernel runs out in about 4,800 steps`.
   */
  text: string;
}
/**
 * One thing found holding memory that grows with the step count. Found without reading tensor data; nothing found is kept alive (R49).
 */
export interface ILeakHolder {
  /**
   * The holder's name as the notebook sees it: a global (`total_loss`), an attribute path (`model.cache`), or a hook's owner.
   */
  name: string;
  /**
   * graph: a tensor whose autograd graph reaches back over many steps; container: a list/dict/deque of tensors growing by about one entry per step; hook: a tensor kept by a hook registered on a module or tensor; closure: a tensor kept by a function's closure or default.
   */
  kind: 'graph' | 'container' | 'hook' | 'closure';
  bytes: Bytes;
  /**
   * graph: steps of graph held (autograd nodes per step when not known); container: tensors held.
   */
  count: number | null;
  text: string;
  fix: string | null;
}
/**
 * The opt-in pause before the memory limit (`set_memory_guard`).
 */
export interface IMemoryGuard {
  /**
   * Fraction of the limit at which training pauses (null: off).
   */
  pause_at: number | null;
  limit: Bytes;
  /**
   * cgroup: the kernel's cgroup memory.max; host: used + the host's MemAvailable; device: the CUDA device's total memory.
   */
  limit_source: 'cgroup' | 'host' | 'device' | null;
  /**
   * Why training was paused by the guard, until it is resumed.
   */
  tripped: string | null;
}
/**
 * Where activation memory goes: the bytes each module saved for backward during one forward/backward (saved-tensor hooks; parameters not counted), and the largest batch that fits.
 */
export interface IActivations {
  /**
   * armed: the next forward/backward of a watched model is measured.
   */
  state: 'armed' | 'done' | 'failed';
  time: number;
  device: string | null;
  run: number | null;
  step: number | null;
  /**
   * The batch size measured (first dimension of the model's first tensor input).
   */
  batch: number | null;
  total: Bytes;
  per_sample: Bytes;
  /**
   * @maxItems 12
   */
  modules: IActivationModule[];
  /**
   * A byte count; null when not known (an `unavailable` or `*_reason` field says why).
   */
  free: number | null;
  /**
   * cgroup: the kernel's cgroup memory.max; host: used + the host's MemAvailable; device: the CUDA device's total memory.
   */
  limit_source: 'cgroup' | 'host' | 'device' | null;
  /**
   * The largest batch whose activations fit in `free` at this per-sample cost.
   */
  fits: number | null;
  text: string;
}
export interface IActivationModule {
  name: string;
  bytes: Bytes;
  tensors: number;
}
/**
 * OOM autopsy, broadcast when a cell fails with an out-of-memory error (after its `exception`, which it names in `exception_id`); replayed with `replay: true` after a snapshot. Strings and numbers only.
 */
export interface IOom {
  method: 'oom';
  id: string;
  time: number;
  replay: boolean;
  execution_count: number | null;
  cell_id: string | null;
  /**
   * The `id` of the `exception` message of the same failure.
   */
  exception_id: string | null;
  exception: {
    type: string;
    message: string;
  };
  device: string;
  headline: string;
  requested_bytes: Bytes;
  /**
   * Numbers parsed from the message (null where it had none).
   */
  message_facts: {
    [k: string]: Bytes;
  };
  /**
   * The allocator's counters right after the failure; null on CPU or when unreadable (`allocator_reason`).
   */
  allocator: IAllocatorCounters | null;
  allocator_reason: string | null;
  /**
   * What the remedies were chosen from (bytes; the allocator's, else the message's).
   */
  numbers: {
    device: string;
    requested: Bytes;
    total: Bytes;
    allocated: Bytes;
    reserved: Bytes;
    parameters: Bytes;
    gradients: Bytes;
    optimizer_state: Bytes;
    other: Bytes;
  };
  breakdown: IMemoryBreakdownRow;
  models: string[];
  optimizers: string[];
  /**
   * @maxItems 15
   */
  tensors: IOomTensor[];
  tensors_total: number;
  tensors_bytes: number;
  /**
   * torch.cuda.memory_summary() at the failure (show collapsed).
   */
  summary: string | null;
  summary_truncated: boolean;
  /**
   * Most fitting first; `release_refs` always last.
   *
   * @minItems 1
   */
  remedies: IOomRemedy[];
  capture_ms: number;
}
/**
 * A live tensor on the failing device, from metadata only. One row per storage: `name` is the first name reaching it (namespace before frames), `also` the others.
 */
export interface IOomTensor {
  name: string;
  also: string[];
  kind: 'variable' | 'element' | 'parameter' | 'gradient';
  where: 'namespace' | 'frame';
  function: string | null;
  lineno: number | null;
  shape: number[];
  dtype: string;
  device: string;
  /**
   * Bytes of its storage.
   */
  nbytes: number;
  requires_grad: boolean;
  /**
   * An autograd output: usually an activation kept for backward.
   */
  grad_fn: boolean;
}
export interface IOomRemedy {
  kind:
    | 'host_memory'
    | 'huge_allocation'
    | 'fragmentation'
    | 'activations'
    | 'optimizer_state'
    | 'gradients_kept'
    | 'reduce_batch'
    | 'release_refs';
  /**
   * The numbers behind it, one line.
   */
  title: string;
  /**
   * What to do; code in backticks (render as text).
   */
  detail: string;
  /**
   * A snippet to copy.
   */
  code: string | null;
  /**
   * The share of allocated memory this remedy is about.
   */
  share: number | null;
}
/**
 * Training control state, broadcast on every change, when the loop pauses, and in every snapshot.
 */
export interface IControl {
  method: 'control';
  /**
   * max_norm applied at every optimizer step (as clip_grad_norm_), or null.
   */
  clip: number | null;
  paused: boolean;
  /**
   * The step (within the current run) the loop is held at.
   */
  paused_at: number | null;
  /**
   * Step boundaries seen in the current run (the last run when idle).
   */
  step: number;
  /**
   * Cumulative learning-rate factor applied, or null.
   */
  lr_scale: number | null;
  optimizers: string[];
  /**
   * Why the last step was not clipped (non-finite norm), if so.
   */
  last_refusal: string | null;
  /**
   * No step boundary in the last few seconds or no cell running: Pause, Step and learning-rate changes are refused.
   */
  idle?: boolean;
  /**
   * The current run (the last run when idle), or null before any.
   */
  run?: number | null;
  targets?: IControlTarget[];
  /**
   * The default target's key (the optimizer that stepped most recently).
   */
  target?: string | null;
}
/**
 * One optimizer (or hand-updated model) seen stepping in the current run (the last run when idle).
 */
export interface IControlTarget {
  /**
   * Stable per optimizer object for this kernel session.
   */
  key: string;
  name: string;
  /**
   * It stepped in the current run and the run is not idle.
   */
  stepping: boolean;
  /**
   * A loop without torch.optim: no learning rate to change.
   */
  by_hand: boolean;
  groups: IControlGroup[];
}
export interface IControlGroup {
  index: number;
  /**
   * A number, a non-finite number spelled as a string, or null (not known yet).
   */
  lr: FiniteOrSpecial | null;
  /**
   * A number, a non-finite number spelled as a string, or null (not known yet).
   */
  initial_lr: FiniteOrSpecial | null;
  /**
   * The panel changed this group's lr (in this run, or in the last run of this optimizer and the lr is still as that run left it).
   */
  changed: boolean;
}
/**
 * The runs: broadcast when a run starts or ends and about every 2 s while one runs, and sent to a comm that opens, right after `snapshot`.
 */
export interface IRuns {
  method: 'runs';
  /**
   * The running run's id, or null when idle.
   */
  current: number | null;
  /**
   * The last 20 runs, oldest first.
   *
   * @maxItems 20
   */
  runs: IRunInfo[];
}
/**
 * One run: a stretch of training with its own step numbering and alarms.
 */
export interface IRunInfo {
  /**
   * Increasing per kernel-side session.
   */
  id: number;
  /**
   * Unix time in seconds.
   */
  start: number;
  /**
   * Unix time the run ended, or null while it runs.
   */
  end: number | null;
  /**
   * Why it started: the first run of the session, a step after idle or in a new cell execution, a new optimizer object stepping in another cell execution, or a logged step that went backwards.
   */
  reason: 'first' | 'idle' | 'new_optimizer' | 'step_backwards';
  /**
   * The notebook cell that started it (pre_run_cell's cell_id), when known.
   */
  cell_id: string | null;
  execution_count: number | null;
  /**
   * Names of the optimizers (or hand-updated models) that stepped in it.
   */
  optimizers: string[];
  /**
   * Step boundaries taken in the run.
   */
  steps: number;
  /**
   * Alarms raised in the run.
   */
  alerts: number;
}
/**
 * Worker processes (ranks) streaming to this kernel: broadcast at most 10 times a second while one is attached (and once when the job ends), and sent to a comm that opens, after `runs`, with `replay: true`.
 */
export interface IRanks {
  method: 'ranks';
  /**
   * true: `points` holds every kept point (replace); false: only new points (append).
   */
  replay: boolean;
  /**
   * The current (or last) job; null when no worker ever attached.
   */
  job: IRankJob | null;
  /**
   * @maxItems 1024
   */
  ranks: IRankState[];
  /**
   * @maxItems 1024
   */
  points: IRankPoints[];
  /**
   * The job's alarms, oldest first (the first is the root cause).
   *
   * @maxItems 50
   */
  alarms: IRankAlarm[];
  endpoint: {
    transport: 'ipc' | 'tcp' | 'off';
    /**
     * Connections and messages refused since the endpoint opened: without the key (at the connection), or forged, replayed, malformed, over the frame or byte limit, or over the rate limit for unverified senders.
     */
    refused: number;
  };
}
/**
 * The processes of one torch.distributed job (one world) that attached to this kernel.
 */
export interface IRankJob {
  id: number;
  started: number;
  world_size: number;
  state: 'running' | 'ended';
  transport: 'ipc' | 'tcp';
  paused_at: number | null;
  pending: IRankPending | null;
  /**
   * Only for a job whose gradients are sharded (FSDP's fully_shard: DTensor gradients): each rank's grad_norm is the norm of its own shards, and the job's global gradient norm is combined in the kernel from the ranks' shard norms of one step, sqrt(sum of squares / replicas), with no collective.
   */
  sharded?: {
    /**
     * How many ranks hold each shard (1 for FSDP; the replicate dimension's size for HSDP).
     */
    replicas: number;
    /**
     * The global gradient norm at global_step; null until every rank of the world has read one same step.
     */
    global_norm: FiniteOrSpecial | null;
    global_step: number | null;
  };
}
/**
 * An all-rank action agreed for one step.
 */
export interface IRankPending {
  action: string;
  at_step: number;
  request_id: RequestId;
}
/**
 * One rank now.
 */
export interface IRankState {
  /**
   * The rank's number (its identity's `rank`). Since 2.8.
   */
  rank: number;
  identity?: IRankIdentity1;
  /**
   * starting: attached, no step yet; running: stepping; waiting: its training thread is inside a torch collective or backward (waiting for the others); paused: held by a ranks_pause; stalled: no step for the hang threshold while not waiting; exited / failed: the process ended (failed: with an exception, or killed by a signal, or gone without a word; exited: also a rank its launcher stopped after another rank failed); lost: no message for 10 s.
   */
  state:
    | 'starting'
    | 'running'
    | 'waiting'
    | 'paused'
    | 'stalled'
    | 'exited'
    | 'failed'
    | 'lost';
  /**
   * Optimizer steps taken by this rank in the job.
   */
  step: number;
  step_time_s: number | null;
  /**
   * The part of a step the training thread spends outside torch's collectives and backward (sampled stacks): the rank's own work. A straggler's is the largest.
   */
  own_time_s: number | null;
  /**
   * Total gradient norm at grad_step (after DDP's all-reduce).
   */
  grad_norm: FiniteOrSpecial | null;
  grad_step: number | null;
  memory_bytes: number | null;
  /**
   * cuda: torch.cuda.memory_allocated of the rank's device; host: the process's resident set.
   */
  memory_kind: 'cuda' | 'host';
  /**
   * Seconds since the kernel last heard from the rank.
   */
  last_seen_s: number;
  /**
   * Seconds since the rank's last step (null before the first).
   */
  since_step_s: number | null;
  /**
   * max_norm while all-rank clipping is on.
   */
  clip: number | null;
  /**
   * Product of the all-rank LR scalings applied so far (1 when none).
   */
  lr_scale: number;
  /**
   * Where its training thread is now: in user code, inside a torch collective/backward, held by pause, or unknown.
   */
  phase: 'user' | 'torch_wait' | 'paused' | 'none';
  /**
   * Its gradients are sharded (FSDP): grad_norm is the norm of this rank's shards, not of the whole gradients.
   */
  sharded?: true;
}
/**
 * Always with `replay: true` and with 16 ranks or fewer. Above 16 ranks a broadcast (`replay: false`) carries it only for a rank the panels do not know yet (a new rank or job) or whose identity changed: a panel keeps each rank's identity from the messages before (since 2.8). A panel that meets a rank whose identity it does not have asks for the snapshot.
 */
export interface IRankIdentity1 {
  rank: number;
  world_size: number;
  local_rank: number | null;
  host: string;
  pid: number;
  /**
   * How the worker attached: started by torch.multiprocessing spawn from the notebook, forked from the kernel, a torchrun (or other) subprocess that inherited the endpoint, or jupyterlab_torchdbg.attach() in a script started elsewhere.
   */
  launcher: 'spawn' | 'fork' | 'torchrun' | 'attach';
}
/**
 * New per-step points of one rank since the previous `ranks` message (all kept points when `replay`). Arrays of equal length.
 */
export interface IRankPoints {
  rank: number;
  /**
   * @maxItems 5000
   */
  steps: number[];
  /**
   * @maxItems 5000
   */
  step_time_s: (number | null)[];
  /**
   * @maxItems 5000
   */
  grad_norm: (FiniteOrSpecial | null)[];
  /**
   * @maxItems 5000
   */
  memory_bytes: (number | null)[];
}
/**
 * A multi-process alarm.
 */
export interface IRankAlarm {
  id: string;
  /**
   * desync: the rank's all-reduced gradient norm differs from the others' at the same step; straggler: its own time per step is far above the others'; hang: it has not stepped while the others wait; failed: its process raised; lost: it stopped answering; action: an all-rank action was missed by this rank; non_finite: a NaN/Inf gradient, `rank` the rank where it began (its own batch, forward or loss) when one did; explosion / vanishing: the kernel's gradient alarms judged on the rank's own norms.
   */
  kind:
    | 'desync'
    | 'straggler'
    | 'hang'
    | 'failed'
    | 'lost'
    | 'action'
    | 'non_finite'
    | 'explosion'
    | 'vanishing';
  rank: number;
  step: number | null;
  time: number;
  message: string;
  /**
   * desync: the first layer whose norm differs; non_finite: the module or layer its cause names (else the layer nearest the loss with a non-finite gradient); explosion: the layer carrying the norm; vanishing: the first layer below the floor.
   */
  layer?: string | null;
  /**
   * non_finite: what made it, found from the ranks' own forward data (the kernel's at-step diagnosis).
   */
  cause?:
    | 'input'
    | 'forward'
    | 'weights'
    | 'loss'
    | 'backward'
    | 'overflow'
    | 'unknown';
  /**
   * non_finite / explosion / vanishing: every rank that saw it (under DDP every rank: their gradients are all-reduced).
   *
   * @maxItems 1024
   */
  ranks?: number[];
  /**
   * non_finite / explosion / vanishing: what to do, fitting the cause.
   */
  remedy?: string | null;
  /**
   * hang: the stuck rank's training-thread stack, one 'file:line in function: code' per frame, taken inside the worker: the user's frames first (outermost first), then the library's and the tool's (outermost first) when `stack_user` is present, else outermost first.
   *
   * @maxItems 64
   */
  stack: string[];
  /**
   * hang: how many of `stack`'s first lines are the user's frames (a cell or a user file); the rest are collapsed like the exception view's library frames.
   */
  stack_user?: number;
  collective?: IRankCollective;
  /**
   * hang (2.7): every rank's stack merged: ranks grouped by their innermost frame of their own code (else their innermost frame) and the collective they are in, lowest rank first.
   *
   * @maxItems 16
   */
  merged?: IRankStackGroup[];
}
/**
 * hang (2.7): the collective the hung ranks wait in, read from torch's flight recorder in each rank (`source`: `flight_recorder`, or `sequence` where only the default group's sequence number and the stack were available).
 */
export interface IRankCollective {
  /**
   * The collective as torch names it (all_reduce, broadcast, allgather, barrier...).
   */
  op: string | null;
  /**
   * Its sequence number in its process group (the same on every rank of the group).
   */
  seq: number;
  /**
   * The process group: `default` for the world, else its description or id.
   */
  group: string;
  /**
   * Its input tensors' sizes and dtypes, e.g. `[1024] float32`.
   */
  shapes?: string | null;
  /**
   * Every rank in it is inside backward (their stacks): for an all_reduce, DDP's gradient all-reduce (issued by its C++ reducer).
   */
  ddp_backward?: boolean;
  /**
   * @maxItems 1024
   */
  ranks_in: number[];
  /**
   * Ranks of its group whose newest collective on that group has a lower sequence number (or none): the ones the others wait for.
   *
   * @maxItems 1024
   */
  never_entered: number[];
  source?: string;
}
/**
 * hang (2.7): ranks stopped at the same place.
 */
export interface IRankStackGroup {
  /**
   * @maxItems 1024
   */
  ranks: number[];
  /**
   * `file:line in function` of the innermost frame of their own code.
   */
  where: string;
  /**
   * The collective they wait in, as a label (`all_reduce (seq 41, default group, [1024] float32)`), or null.
   */
  in: string | null;
}
/**
 * Kernel -> every frontend of the kernel, when the kernel side loads (%load_ext, %reload_ext, the panel's auto-load): the data of a comm_open that the kernel initiates on the target `jupyterlab_torchdbg.loaded` and closes at once. A panel whose kernel side was not loaded opens its own comm then.
 */
export interface ILoaded {
  method: 'loaded';
  protocol_version: ProtocolVersion;
  /**
   * The `session_id` its `hello` will carry.
   */
  session_id: string;
}
/**
 * The run store's record of this notebook's earlier kernels, sent to a comm that opens (after `runs`) and after `dismiss_record`. `kernels` is newest first and never holds this kernel.
 */
export interface IRecord {
  method: 'record';
  /**
   * The notebook's file name (JPY_SESSION_NAME's last part), or null when the kernel was not started for a notebook.
   */
  notebook: string | null;
  /**
   * on: this kernel writes its record; off: no notebook to key it by; unavailable: the store could not be opened (`note`).
   */
  store: 'on' | 'off' | 'unavailable';
  /**
   * @maxItems 10
   */
  kernels: IRecordKernel[];
  note: string | null;
}
/**
 * An earlier kernel of this notebook, as its record in the run store has it.
 */
export interface IRecordKernel {
  id: string;
  started: number;
  last_write: number;
  end: IRecordEnd;
  run: number | null;
  step: number | null;
  memory: null | {
    used: Bytes;
    limit: Bytes;
    per_step: number | null;
  };
  /**
   * e.g. `The kernel died at step 4,812 of run 3 (killed by signal 9; memory was climbing 2.1 MiB/step, 23.6 of 24 GiB)`.
   */
  text: string;
  /**
   * @maxItems 50
   */
  runs: IRecordRun[];
  exception: null | {
    ename: string;
    evalue: string;
    cell_id: string | null;
    line: number | null;
    time: number;
  };
  /**
   * The user dismissed this kernel's banner (`dismiss_record`).
   */
  dismissed: boolean;
}
/**
 * How a recorded kernel ended, from what the system said: its exit status or signal (seen by a watcher process while the kernel was a zombie), the cgroup's memory.events oom_kill count, or a clean shutdown written by the kernel itself. `unknown` rather than a guess.
 */
export interface IRecordEnd {
  kind: 'running' | 'shutdown' | 'exit' | 'signal' | 'oom_kill' | 'unknown';
  /**
   * The exit status (exit) or signal number (signal, oom_kill).
   */
  code: number | null;
  /**
   * How many more oom_kill events the kernel's cgroup counted while it ran.
   */
  oom_kills: number | null;
  text: string;
}
export interface IRecordRun {
  id: number;
  start: number;
  end: number | null;
  steps: number;
  alerts: number;
  cell_id: string | null;
  execution_count: number | null;
  optimizers: string[];
}
/**
 * One recorded run's data, the answer to `open_record`: its series (downsampled to at most 2,000 points each), alarms and the kernel's last exception.
 */
export interface IRecordRunData {
  method: 'record_run';
  kernel: string;
  run: number;
  info: IRecordRun;
  /**
   * @maxItems 400
   */
  series: IRecordSeries[];
  /**
   * @maxItems 200
   */
  alerts: IAlertItem[];
}
export interface IRecordSeries {
  name: string;
  x: number[];
  y: FiniteOrSpecial[];
}
/**
 * The data of the panel's comm_open.
 */
export interface IOpen {
  method: 'open';
  protocol_version: ProtocolVersion;
  client?: string;
  /**
   * A stable id of the panel's browser tab (kept across reloads of that tab). When a comm opens with a client_id that a live comm already has, the kernel closes the older comm (a reloaded or crashed page left it behind). Clients without one are never closed by this rule.
   */
  client_id?: string;
}
export interface IActionEnvelope {
  method: 'action';
  request_id: RequestId;
  action: string;
  args: {
    [k: string]: unknown;
  };
}
/**
 * Ask for a fresh snapshot (sent before the ack).
 */
export interface IActionSnapshot {
  action?: 'snapshot';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * Forget the recorded history of the logged series (all, or the named ones).
 */
export interface IActionClearHistory {
  action?: 'clear_history';
  args?: {
    /**
     * @maxItems 10000
     */
    names?: string[];
  };
  [k: string]: unknown;
}
/**
 * Gradient sampling: every N optimizer steps (1 = every step), 'auto' (the monitor keeps its cost under 1% of step time), or 'off'.
 */
export interface IActionSetStride {
  action?: 'set_stride';
  args?: {
    stride: number | ('auto' | 'off');
  };
  [k: string]: unknown;
}
/**
 * Change any of the gradient alarm settings (at least one).
 */
export interface IActionSetThresholds {
  action?: 'set_thresholds';
  args?: {
    explode_abs?: number | null;
    explode_factor?: number;
    explode_warmup?: number;
    vanish_floor?: number;
    vanish_ratio?: number;
    vanish_steps?: number;
    amp_skips?: number;
    amp_min_scale?: number;
  };
  [k: string]: unknown;
}
/**
 * Forget the recent gradient alerts (they are no longer replayed in snapshots).
 */
export interface IActionClearAlerts {
  action?: 'clear_alerts';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * Replay the kept non-finite step (the `grads` status's `replayable`) once under torch.autograd.detect_anomaly, on the pre-step weights, without touching the model's parameters, .grad, buffers or RNG state. While a cell trains it runs at the next optimizer step (refused after 30 s without one). The result is a `ReplayResult`; it is also kept as a `non_finite_replay` alert.
 */
export interface IActionReplayStep {
  action?: 'replay_step';
  args?: {
    /**
     * The track whose kept step to replay (default: the kept one): a track name as the `grads` status gives it (no control characters).
     */
    track?: string;
  };
  [k: string]: unknown;
}
/**
 * Skip optimizer steps whose gradients are NaN/Inf (all tracks; `watch(..., skip_nonfinite=True)` does it for one model): the weights and optimizer state stay as they were, each skip is counted (`skipped_nonfinite`). Every step is then sampled; on CUDA that adds one small host sync per step.
 */
export interface IActionSkipNonfinite {
  action?: 'skip_nonfinite';
  args?: {
    on: boolean;
  };
  [k: string]: unknown;
}
/**
 * torch.cuda.empty_cache(); the ack has reserved bytes before/after per device. Refused when CUDA is not initialised or after a sticky CUDA error (restart the kernel).
 */
export interface IActionEmptyCache {
  action?: 'empty_cache';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * Drop what keeps the last error's frames and IPython's output cache alive, gc, then empty the CUDA cache. Ends %debug on the last error.
 */
export interface IActionReleaseRefs {
  action?: 'release_refs';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * Start or stop the CUDA allocator's memory history. Stop writes a snapshot pickle in the kernel's working directory and returns the top allocation sites.
 */
export interface IActionRecordMemory {
  action?: 'record_memory';
  args?:
    | {
        op: 'start';
        max_entries?: number;
      }
    | {
        op: 'stop';
      };
  [k: string]: unknown;
}
/**
 * torch.save of the models' and optimizers' state dicts to a plain file name in the kernel's working directory. An existing file is replaced only with `overwrite: true`.
 */
export interface IActionSaveCheckpoint {
  action?: 'save_checkpoint';
  args?: {
    filename?: string;
    overwrite?: boolean;
  };
  [k: string]: unknown;
}
/**
 * Clip gradients at every optimizer step from the next one, exactly as clip_grad_norm_(params, max_norm).
 */
export interface IActionClip {
  action?: 'clip';
  args?: {
    max_norm: number;
  };
  [k: string]: unknown;
}
/**
 * Stop clipping.
 */
export interface IActionUnclip {
  action?: 'unclip';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * Hold the loop at the next optimizer step boundary (needs comms over a kernel subshell).
 */
export interface IActionPause {
  action?: 'pause';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * Release a pause.
 */
export interface IActionResume {
  action?: 'resume';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * While paused: let exactly one optimizer step through.
 */
export interface IActionStep {
  action?: 'step';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * Multiply every param group learning rate of the target by factor at its next step. Refused while idle.
 */
export interface IActionScaleLr {
  action?: 'scale_lr';
  args?: {
    factor: number;
    /**
     * A target key from `control.targets` (`name#n`); absent: `control.target`.
     */
    optimizer?: string;
  };
  [k: string]: unknown;
}
/**
 * Restore every changed param group's lr from before the panel's first change: at the target's next step while a run steps, at once while idle (after the run). Refused when nothing was changed.
 */
export interface IActionResetLr {
  action?: 'reset_lr';
  args?: {
    /**
     * A target key from `control.targets` (`name#n`); absent: `control.target`.
     */
    optimizer?: string;
  };
  [k: string]: unknown;
}
/**
 * Set the absolute learning rate of one param group (all groups when `group` is absent: ratios between groups kept) at the target's next step. Refused while idle and for loops without torch.optim.
 */
export interface IActionSetLr {
  action?: 'set_lr';
  args?: {
    lr: number;
    /**
     * A target key from `control.targets` (`name#n`); absent: `control.target`.
     */
    optimizer?: string;
    group?: number;
  };
  [k: string]: unknown;
}
/**
 * Clip gradients on every rank from one agreed optimizer step on (clip_grad_norm_ after DDP's all-reduce, so replicas stay identical). The ack says the step; refused if a rank does not answer in time.
 */
export interface IActionRanksClip {
  action?: 'ranks_clip';
  args?: {
    max_norm: number;
  };
  [k: string]: unknown;
}
/**
 * Stop all-rank clipping from one agreed step.
 */
export interface IActionRanksUnclip {
  action?: 'ranks_unclip';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * Hold every rank before one agreed optimizer step.
 */
export interface IActionRanksPause {
  action?: 'ranks_pause';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * Release paused ranks.
 */
export interface IActionRanksResume {
  action?: 'ranks_resume';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * Multiply every param group's lr by factor on every rank at one agreed step.
 */
export interface IActionRanksScaleLr {
  action?: 'ranks_scale_lr';
  args?: {
    factor: number;
  };
  [k: string]: unknown;
}
/**
 * Pause training (at the next optimizer step) when memory reaches `pause_at` of the limit; null turns it off. Ack result: the new `guard`.
 */
export interface IActionSetMemoryGuard {
  action?: 'set_memory_guard';
  args?: {
    pause_at: number | null;
  };
  [k: string]: unknown;
}
/**
 * Measure the bytes each module saves for backward during the next forward/backward of a watched model (now, when a cell trains; else at the next training step). Ack result: `{state}`; the report comes in `memory.activations`.
 */
export interface IActionMeasureActivations {
  action?: 'measure_activations';
  args?: NoArgs;
  [k: string]: unknown;
}
/**
 * Send one recorded run of an earlier kernel of this notebook (`record_run`). Ack result: `{series, alerts}` counts.
 */
export interface IActionOpenRecord {
  action?: 'open_record';
  args?: {
    /**
     * A recorded kernel's id (`record.kernels[].id`).
     */
    kernel: string;
    run: number;
  };
  [k: string]: unknown;
}
/**
 * Mark an earlier kernel's banner dismissed (kept in the store, so a reload keeps it dismissed).
 */
export interface IActionDismissRecord {
  action?: 'dismiss_record';
  args?: {
    /**
     * A recorded kernel's id (`record.kernels[].id`).
     */
    kernel: string;
  };
  [k: string]: unknown;
}
/**
 * Write a run's series (and alarms as text) as TensorBoard event files under `torchdbg-runs/` beside the notebook. `kernel` null: this kernel's run. Needs the `tensorboard` package. Ack result: `{path, scalars}` (path relative to the kernel's working directory).
 */
export interface IActionExportTensorboard {
  action?: 'export_tensorboard';
  args?: {
    run: number;
    kernel: string | null;
  };
  [k: string]: unknown;
}
/**
 * `record_memory`: a start (`on`; `armed` until CUDA's first use; `note` when it was already recording), a stop before CUDA was used (`off` with `note`), or a stop that wrote the snapshot (`off` with the `MemorySnapshotSummary` fields).
 */
export type RecordMemoryResult =
  | {
      state: 'on';
      max_entries: number;
      /**
       * When recording started (epoch seconds).
       */
      since: number;
      /**
       * A start while already recording: nothing changed.
       */
      note?: string;
    }
  | {
      /**
       * Starts when the user's code first initialises CUDA.
       */
      state: 'armed';
      max_entries: number;
      since: null;
      /**
       * That it starts at CUDA's first use (or, started again: already recording).
       */
      note: string;
    }
  | {
      state: 'off';
      max_entries: null;
      since: null;
      /**
       * The stop of an armed recording: CUDA was never used, nothing was recorded (no file).
       */
      note: string;
    }
  | {
      state: 'off';
      max_entries: null;
      since: null;
      time: number;
      /**
       * The snapshot pickle's file name, in the kernel's working directory.
       */
      file: string;
      bytes: number;
      entries: number;
      oom_events: number;
      /**
       * @maxItems 10
       */
      top_sites: IAllocationSite[];
      /**
       * @maxItems 10
       */
      live_sites: IAllocationSite[];
    };
/**
 * `dismiss_record`: nothing (the `record` message is sent again).
 */
export type DismissRecordResult = Record<string, never>;

/**
 * Each action's `result` in its `ack`, by action name (the schema's `x-result`).
 */
export interface IActionResults {
  snapshot: ISnapshotResult;
  clear_history: IClearHistoryResult;
  set_stride: ISetStrideResult;
  set_thresholds: ISetThresholdsResult;
  clear_alerts: IClearAlertsResult;
  replay_step: IReplayResult;
  skip_nonfinite: ISkipNonfiniteResult;
  empty_cache: IEmptyCacheResult;
  release_refs: IReleaseRefsResult;
  record_memory: RecordMemoryResult;
  save_checkpoint: ISaveCheckpointResult;
  clip: IClipResult;
  unclip: IUnclipResult;
  pause: IPauseResult;
  resume: IResumeResult;
  step: IStepResult;
  scale_lr: IScaleLrResult;
  reset_lr: IResetLrResult;
  set_lr: ISetLrResult;
  ranks_clip: IRanksAtStepResult;
  ranks_unclip: IRanksAtStepResult;
  ranks_pause: IRanksAtStepResult;
  ranks_resume: IRanksResumeResult;
  ranks_scale_lr: IRanksAtStepResult;
  set_memory_guard: ISetMemoryGuardResult;
  measure_activations: IMeasureActivationsResult;
  open_record: IOpenRecordResult;
  dismiss_record: DismissRecordResult;
  export_tensorboard: IExportTensorboardResult;
}
/**
 * `snapshot`: the snapshot was sent again.
 */
export interface ISnapshotResult {
  /**
   * How many series the resent snapshot names.
   */
  series: number;
}
/**
 * `clear_history`: the series' points were dropped.
 */
export interface IClearHistoryResult {
  /**
   * How many series were cleared.
   */
  cleared: number;
}
/**
 * `set_stride`: the gradient sampling stride now in force.
 */
export interface ISetStrideResult {
  mode: 'auto' | 'fixed' | 'off';
  /**
   * The fixed stride; null unless `mode` is fixed.
   */
  stride: number | null;
}
/**
 * `set_thresholds`: the gradient alarm thresholds now in force.
 */
export interface ISetThresholdsResult {
  thresholds: IGradThresholds;
}
/**
 * `clear_alerts`: the kept alerts were dropped.
 */
export interface IClearAlertsResult {
  /**
   * How many alerts were cleared.
   */
  cleared: number;
}
/**
 * `skip_nonfinite`: whether non-finite steps are now skipped.
 */
export interface ISkipNonfiniteResult {
  on: boolean;
}
/**
 * `empty_cache`: reserved bytes before and after, per device.
 */
export interface IEmptyCacheResult {
  /**
   * Each device the allocator reports, by index (empty when it cannot be read).
   */
  devices: ICacheDeviceResult[];
  /**
   * The reserved bytes released, summed over the devices.
   */
  freed_bytes: number;
}
/**
 * One CUDA device's allocator figures before and after `empty_cache` or `release_refs`.
 */
export interface ICacheDeviceResult {
  device: string;
  /**
   * Bytes allocated to tensors before (0 when not read).
   */
  allocated_before: number;
  /**
   * Bytes allocated to tensors after (0 when not read).
   */
  allocated_after: number;
  /**
   * Bytes the caching allocator reserved before (0 when not read).
   */
  reserved_before: number;
  /**
   * Bytes the caching allocator reserved after (0 when not read).
   */
  reserved_after: number;
}
/**
 * `release_refs`: what was released, objects collected, memory before and after.
 */
export interface IReleaseRefsResult {
  /**
   * What was holding references and was released (what was set only).
   */
  cleared: (
    | 'sys.last_traceback'
    | 'sys.last_value'
    | 'sys.last_type'
    | 'sys.last_exc'
    | 'InteractiveTB.tb'
    | 'last_execution_result'
    | 'Out/_/__/___'
  )[];
  /**
   * Objects `gc.collect()` found unreachable.
   */
  collected: number;
  /**
   * Before/after per CUDA device; empty when CUDA is not initialised (or not usable).
   */
  devices: ICacheDeviceResult[];
  /**
   * The kernel's resident memory before (null: unreadable).
   */
  rss_before: Bytes;
  /**
   * The kernel's resident memory after (null: unreadable).
   */
  rss_after: Bytes;
  /**
   * That `%debug` on the last error is no longer possible (show it).
   */
  note: string;
}
/**
 * `save_checkpoint`: what was written.
 */
export interface ISaveCheckpointResult {
  /**
   * The file name written, in the kernel's working directory (a default name with its `-N` suffix).
   */
  file: string;
  /**
   * The file's size.
   */
  bytes: number;
  /**
   * The names of the models saved.
   */
  models: string[];
  /**
   * The names of the optimizers saved.
   */
  optimizers: string[];
  /**
   * An existing file was replaced (`overwrite: true`).
   */
  overwritten: boolean;
}
/**
 * `clip`: the gradient-norm clip queued.
 */
export interface IClipResult {
  clip: number;
  /**
   * When it takes effect, in words.
   */
  applies: string;
}
/**
 * `unclip`: clipping is off.
 */
export interface IUnclipResult {
  clip: null;
}
/**
 * `pause`: training pauses.
 */
export interface IPauseResult {
  paused: true;
  /**
   * When it takes effect, in words.
   */
  applies: string;
}
/**
 * `resume`: training goes on.
 */
export interface IResumeResult {
  paused: false;
}
/**
 * `step`: one step runs, then training pauses again.
 */
export interface IStepResult {
  /**
   * What runs, in words.
   */
  step: string;
}
/**
 * `scale_lr`: the LR scale queued for one optimizer.
 */
export interface IScaleLrResult {
  /**
   * The key of the optimizer it acts on (a `ControlTarget` key).
   */
  optimizer: string;
  pending: true;
  /**
   * When it takes effect, in words.
   */
  applies: string;
  /**
   * The optimizer's LR scale once the queued changes apply.
   */
  lr_scale: number;
}
/**
 * `reset_lr`: one optimizer's LR scale is reset.
 */
export interface IResetLrResult {
  /**
   * The key of the optimizer it acts on (a `ControlTarget` key).
   */
  optimizer: string;
  lr_scale: null;
  /**
   * When it takes effect, in words.
   */
  applies: string;
}
/**
 * `set_lr`: the LR queued for one optimizer.
 */
export interface ISetLrResult {
  /**
   * The key of the optimizer it acts on (a `ControlTarget` key).
   */
  optimizer: string;
  pending: true;
  /**
   * When it takes effect, in words.
   */
  applies: string;
  lr: number;
}
/**
 * `ranks_clip`, `ranks_unclip`, `ranks_pause`, `ranks_scale_lr`: the step at which every rank applies it, and the ranks that agreed.
 */
export interface IRanksAtStepResult {
  at_step: number;
  /**
   * The ranks that agreed.
   */
  ranks: number[];
}
/**
 * `ranks_resume`: the ranks released.
 */
export interface IRanksResumeResult {
  /**
   * The ranks released.
   */
  ranks: number[];
}
/**
 * `set_memory_guard`: the guard now in force (as in `memory.guard`).
 */
export interface ISetMemoryGuardResult {
  guard: IMemoryGuard;
}
/**
 * `measure_activations`: the measurement's state.
 */
export interface IMeasureActivationsResult {
  /**
   * The report's state once the action returns: armed (measured at the next forward/backward), done (measured now, by re-running the last forward), failed (nothing to measure: the report's `text` says why). The report comes in `memory.activations`.
   */
  state: 'armed' | 'done' | 'failed';
}
/**
 * `open_record`: counts of the recorded run sent (`record_run`).
 */
export interface IOpenRecordResult {
  /**
   * How many series the `record_run` message sent holds.
   */
  series: number;
  /**
   * How many alerts it holds.
   */
  alerts: number;
}
/**
 * `export_tensorboard`: where the event files were written.
 */
export interface IExportTensorboardResult {
  /**
   * The new event-file directory, relative to the kernel's working directory (`torchdbg-runs/<notebook>-run<id>-<yyyymmdd-hhmmss>`).
   */
  path: string;
  /**
   * The number of scalar points written.
   */
  scalars: number;
}

/** The protocol version: the schema's `x-protocol-version`. */
export const PROTOCOL_VERSION = '2.8';
