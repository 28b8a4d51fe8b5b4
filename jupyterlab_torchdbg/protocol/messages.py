"""GENERATED FILE, DO NOT EDIT: the protocol's payloads as TypedDicts.

Generated from ``jupyterlab_torchdbg/protocol/messages.schema.json`` by ``scripts/gen_protocol_py.py``
(datamodel-code-generator). Change the schema, then run ``jlpm gen:protocol`` (TypeScript
and Python); ``jlpm gen:protocol:check`` and ``tests/test_protocol_types.py`` fail when
this file is stale. Import it under ``TYPE_CHECKING`` only: nothing here runs.

Every open type below (a dict or list of anything) is a schema object left open on
purpose (``{"type": "object"}`` with no properties: an ``Ack``'s ``result``, typed per
action by the ``*Result`` types (the schema's ``x-result``), a diagnosis's ``facts``), an
object that must stay empty (``NoArgs``, ``DismissRecordResult``), or an array of whatever
the user's batch held (a replayed step's ``index`` / ``batch``).
"""

# ruff: noqa: E501

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from typing_extensions import NotRequired, TypedDict

ProtocolVersion: TypeAlias = str


RequestId: TypeAlias = str


FiniteOrSpecial: TypeAlias = float | Literal["NaN", "Infinity", "-Infinity"]


class Availability(TypedDict):
    available: bool
    version: NotRequired[str | None]
    reason: NotRequired[str | None]


class CudaCapability(TypedDict):
    available: bool | None
    initialized: bool
    device_count: NotRequired[int | None]
    version: NotRequired[str | None]
    reason: NotRequired[str | None]


class Capabilities(TypedDict):
    torch: Availability
    cuda: CudaCapability
    nvml: Availability
    subshells: bool
    tensorboard: NotRequired[Availability]


class Loaded(TypedDict, closed=True):
    method: Literal["loaded"]
    protocol_version: ProtocolVersion
    session_id: str


class Hello(TypedDict, closed=True):
    method: Literal["hello"]
    protocol_version: ProtocolVersion
    package_version: str
    capabilities: Capabilities
    session_id: str
    accepted: bool
    actions: NotRequired[list[str]]


Name: TypeAlias = str


class Block(TypedDict, closed=True):
    id: int
    names: NotRequired[list[Name]]
    count: int
    dropped: NotRequired[int]
    run: NotRequired[int]


class StreamStats(TypedDict):
    messages: int
    points: int
    errors: dict[str, int]


class SnapshotBlock(TypedDict):
    id: int
    names: list[Name]
    count: int
    dropped: NotRequired[int]
    run: NotRequired[int]


RunInfoReason: TypeAlias = Literal["first", "idle", "new_optimizer", "step_backwards"]


class RunInfo(TypedDict, closed=True):
    id: int
    start: float
    end: float | None
    reason: RunInfoReason
    cell_id: str | None
    execution_count: int | None
    optimizers: list[str]
    steps: int
    alerts: int


class Runs(TypedDict, closed=True):
    method: Literal["runs"]
    current: int | None
    runs: list[RunInfo]


class Snapshot(TypedDict, closed=True):
    method: Literal["snapshot"]
    seq: int
    blocks: list[SnapshotBlock]
    truncated: NotRequired[bool]
    stats: StreamStats


class Series(TypedDict, closed=True):
    method: Literal["series"]
    seq: int
    blocks: list[Block]


class Ack(TypedDict, closed=True):
    method: Literal["ack"]
    request_id: RequestId
    action: str
    result: dict[str, Any]
    duplicate: NotRequired[bool]


ErrorCode: TypeAlias = Literal[
    "protocol_mismatch",
    "malformed",
    "unknown_action",
    "invalid_args",
    "refused",
    "failed",
]


class Error(TypedDict, closed=True):
    method: Literal["error"]
    request_id: RequestId | None
    code: ErrorCode
    message: str
    duplicate: NotRequired[bool]


ExceptionElidedItemReason: TypeAlias = Literal["repeated", "limit"]


class ExceptionElidedItem(TypedDict, closed=True):
    after: int
    count: int
    reason: ExceptionElidedItemReason


ExceptionInfoSyntaxOrigin: TypeAlias = Literal["cell", "file", "library"]


class ExceptionInfoSyntax(TypedDict):
    lineno: NotRequired[int | None]
    offset: NotRequired[int | None]
    end_lineno: NotRequired[int | None]
    end_offset: NotRequired[int | None]
    text: NotRequired[str | None]
    msg: NotRequired[str | None]
    file: NotRequired[str]
    origin: NotRequired[ExceptionInfoSyntaxOrigin]
    cell_id: NotRequired[str | None]
    execution_count: NotRequired[int | None]


class ExceptionInfo(TypedDict, closed=True):
    type: str
    module: str
    message: str
    message_truncated: bool
    message_unavailable: NotRequired[bool]
    syntax: NotRequired[ExceptionInfoSyntax]


RelatedExceptionRelation: TypeAlias = Literal["cause", "context"]


class RelatedExceptionWhere(TypedDict):
    file: str
    lineno: int
    function: str
    cell_id: NotRequired[str | None]


class RelatedException(TypedDict):
    relation: NotRequired[RelatedExceptionRelation]
    path: NotRequired[list[int]]
    type: str
    module: str
    message: str
    message_truncated: bool
    message_unavailable: NotRequired[bool]
    where: NotRequired[RelatedExceptionWhere]


ExceptionFrameOrigin: TypeAlias = Literal["cell", "file", "library"]


class ExceptionFrameSource(TypedDict):
    first: int
    lines: list[str]


class ExceptionFrameSpan(TypedDict):
    start_line: NotRequired[int]
    end_line: NotRequired[int]
    start_col: NotRequired[int]
    end_col: NotRequired[int]


LocalKind: TypeAlias = Literal[
    "tensor",
    "module",
    "optimizer",
    "dataset",
    "dataloader",
    "array",
    "number",
    "string",
    "bytes",
    "none",
    "container",
    "object",
    "function",
    "class",
    "pymodule",
]


class Local(TypedDict):
    name: NotRequired[str]
    kind: LocalKind
    type: str
    text: str
    shape: NotRequired[list[int | str] | Literal["n/a"]]
    dtype: NotRequired[str]
    device: NotRequired[str]
    layout: NotRequired[str]
    requires_grad: NotRequired[bool | str]
    is_leaf: NotRequired[bool | str]
    grad: NotRequired[bool | str]
    finite: NotRequired[bool | None]
    min: NotRequired[int | str]
    max: NotRequired[int | str]
    version: NotRequired[int | str]
    nbytes: NotRequired[int | str]
    params: NotRequired[int | str]
    devices: NotRequired[list[str] | Literal["n/a"]]
    dtypes: NotRequired[list[str] | Literal["n/a"]]
    len: NotRequired[int | str]
    items: NotRequired[list[Local]]


DiagnosisCategory: TypeAlias = Literal[
    "device_mismatch",
    "shape_mismatch",
    "dtype_mismatch",
    "index_out_of_range",
    "out_of_memory",
    "inplace_modification",
    "device_side_assert",
    "cuda_error",
    "autograd",
    "non_finite",
    "data_loader",
    "generic",
]


class Culprit(Local):
    frame: NotRequired[int]
    role: NotRequired[str]
    arg: NotRequired[str]
    named: NotRequired[bool]


DiagnosisConfidence: TypeAlias = Literal["certain", "likely"]


class Diagnosis(TypedDict, closed=True):
    category: DiagnosisCategory
    title: str
    headline: str
    culprits: list[Culprit]
    remedy: str | None
    hints: list[str]
    facts: dict[str, Any]
    confidence: DiagnosisConfidence
    links: list[Literal["memory", "grads"]]
    where: int | None


class Open(TypedDict, closed=True):
    method: Literal["open"]
    protocol_version: ProtocolVersion
    client: NotRequired[str]
    client_id: NotRequired[str]


NoArgs: TypeAlias = dict[str, Any]


class ActionSnapshot(TypedDict):
    action: NotRequired[Literal["snapshot"]]
    args: NotRequired[NoArgs]


NullableNumber: TypeAlias = FiniteOrSpecial | None


class GradThresholds(TypedDict, closed=True):
    explode_abs: float | None
    explode_factor: float
    explode_warmup: int
    vanish_floor: float
    vanish_ratio: float
    vanish_steps: int
    amp_skips: int
    amp_min_scale: float


class GradLayerParamsItem(TypedDict, closed=True):
    name: str
    shape: list[int]
    dtype: str


class GradLayer(TypedDict, closed=True):
    name: str
    series: str
    param_series: str
    numel: int
    params: list[GradLayerParamsItem]
    more_params: NotRequired[int]


class GradStats(TypedDict, closed=True):
    last: list[FiniteOrSpecial]
    max: list[float | None]
    min: list[float | None]
    nonfinite: list[int]


GradTrackBoundary: TypeAlias = Literal["optimizer_step", "end_of_backward"]


GradTrackState: TypeAlias = Literal["waiting", "active", "disabled", "no_grads"]


GradTrackMode: TypeAlias = Literal["auto", "fixed", "off"]


GradTrackEveryStep: TypeAlias = Literal["warmup", "rising", "clip", "skip"] | None


class GradTrack(TypedDict, closed=True):
    name: str
    boundary: NotRequired[GradTrackBoundary]
    state: GradTrackState
    reason: str | None
    step: int
    sampled: int
    mode: GradTrackMode
    stride: int
    every_step: NotRequired[GradTrackEveryStep]
    overhead: float | None
    step_time_s: float | None
    sample_cost_s: float | None
    read_cost_s: NotRequired[float | None]
    param_cost_s: NotRequired[float | None]
    budget: NotRequired[float]
    stride_reason: NotRequired[str]
    periodic_cost_s: NotRequired[float | None]
    periodic_share: NotRequired[float | None]
    flush_interval_s: NotRequired[float | None]
    skipped_steps: int
    skip_nonfinite: NotRequired[bool]
    skipped_nonfinite: NotRequired[int]
    skipped_at: NotRequired[list[int]]
    amp_scale: NullableNumber
    local_shard: bool
    coarsened: bool
    total_series: str
    scale_series: str | None
    layers_version: int
    layers: NotRequired[list[GradLayer]]
    stats: NotRequired[GradStats]
    run: NotRequired[int]


GradsState: TypeAlias = Literal["waiting", "active", "off"]


GradsMode: TypeAlias = Literal["auto", "fixed", "off"]


class GradsReplayable(TypedDict, closed=True):
    track: str
    step: int


class Grads(TypedDict, closed=True):
    method: Literal["grads"]
    state: GradsState
    reason: str | None
    mode: GradsMode
    stride: int | None
    budget: float
    thresholds: GradThresholds
    alerts: int
    tracks: list[GradTrack]
    skip_nonfinite: NotRequired[bool]
    replayable: NotRequired[GradsReplayable | None]
    alerts_total: NotRequired[int]


AlertItemKind: TypeAlias = Literal[
    "non_finite",
    "non_finite_forward",
    "explosion",
    "vanishing",
    "amp_skips",
    "amp_scale_collapse",
    "non_finite_replay",
    "non_finite_cause",
    "non_finite_skipped",
    "divergence",
    "memory_leak",
    "memory_limit",
]


AlertItemCause: TypeAlias = Literal[
    "input", "forward", "weights", "loss", "backward", "overflow", "unchecked"
]


AlertItemSeverity: TypeAlias = Literal["warning", "error"]


class SetStrideArgs(TypedDict, closed=True):
    stride: int | Literal["auto", "off"]


class ActionSetStride(TypedDict):
    action: NotRequired[Literal["set_stride"]]
    args: NotRequired[SetStrideArgs]


class SetThresholdsArgs(TypedDict, closed=True):
    explode_abs: NotRequired[float | None]
    explode_factor: NotRequired[float]
    explode_warmup: NotRequired[int]
    vanish_floor: NotRequired[float]
    vanish_ratio: NotRequired[float]
    vanish_steps: NotRequired[int]
    amp_skips: NotRequired[int]
    amp_min_scale: NotRequired[float]


class ActionSetThresholds(TypedDict):
    action: NotRequired[Literal["set_thresholds"]]
    args: NotRequired[SetThresholdsArgs]


Bytes: TypeAlias = int | None


class AllocatorCounters(TypedDict, closed=True):
    allocated: Bytes
    reserved: Bytes
    peak: Bytes
    active: Bytes
    inactive_split: Bytes
    alloc_retries: int | None
    ooms: int | None


class NvmlFields(TypedDict, closed=True):
    used: NotRequired[Bytes]
    total: NotRequired[Bytes]
    util_gpu: NotRequired[float | None]
    util_memory: NotRequired[float | None]
    temperature_c: NotRequired[float | None]
    power_w: NotRequired[float | None]
    power_limit_w: NotRequired[float | None]
    process_used: NotRequired[Bytes]


MemoryDeviceMatchedBy: TypeAlias = (
    Literal["uuid", "visible_devices", "pci_order", "assumed_order"] | None
)


class MemoryDevice(TypedDict, closed=True):
    device: str
    index: int
    name: str | None
    uuid: str | None
    nvml_index: int | None
    matched_by: MemoryDeviceMatchedBy
    mig: bool | None
    series: dict[str, str]
    allocator: AllocatorCounters | None
    allocator_reason: str | None
    nvml: NvmlFields | None
    nvml_reason: str | None
    unavailable: dict[str, str]
    peak_note: NotRequired[str]


MemoryBreakdownRowTotalSource: TypeAlias = Literal["allocated", "rss"] | None


class MemoryBreakdownRow(TypedDict, closed=True):
    device: str
    parameters: int
    gradients: int
    optimizer_state: int
    other: Bytes
    total: Bytes
    total_source: MemoryBreakdownRowTotalSource


class MemoryBreakdown(TypedDict, closed=True):
    devices: list[MemoryBreakdownRow]
    models: list[str]
    optimizers: list[str]
    tensors: int
    truncated: bool
    reason: str | None
    skipped_grads: NotRequired[int]
    note: NotRequired[str]
    cost_ms: float
    time: NotRequired[float]


MemoryRecordingState: TypeAlias = Literal["off", "armed", "on"]


class AllocationSite(TypedDict, closed=True):
    file: str
    line: int
    function: str
    bytes: int
    count: int


class MemorySnapshotSummary(TypedDict, closed=True):
    time: float
    file: str
    bytes: int
    entries: int
    oom_events: int
    top_sites: list[AllocationSite]
    live_sites: list[AllocationSite]


MemoryState: TypeAlias = Literal["waiting", "no_cuda", "cuda_idle", "active", "corrupted"]


class MemoryHost(TypedDict, closed=True):
    rss: Bytes
    reason: str | None
    series: str


class MemoryLastOom(TypedDict, closed=True):
    id: str
    time: float
    device: str
    headline: str


class MemoryNvml(TypedDict, closed=True):
    available: bool
    reason: str | None


OomTensorKind: TypeAlias = Literal["variable", "element", "parameter", "gradient"]


OomTensorWhere: TypeAlias = Literal["namespace", "frame"]


class OomTensor(TypedDict, closed=True):
    name: str
    also: list[str]
    kind: OomTensorKind
    where: OomTensorWhere
    function: str | None
    lineno: int | None
    shape: list[int]
    dtype: str
    device: str
    nbytes: int
    requires_grad: bool
    grad_fn: bool


OomRemedyKind: TypeAlias = Literal[
    "host_memory",
    "huge_allocation",
    "fragmentation",
    "activations",
    "optimizer_state",
    "gradients_kept",
    "reduce_batch",
    "release_refs",
]


class OomRemedy(TypedDict, closed=True):
    kind: OomRemedyKind
    title: str
    detail: str
    code: str | None
    share: float | None


class OomException(TypedDict, closed=True):
    type: str
    message: str


class OomNumbers(TypedDict, closed=True):
    device: str
    requested: Bytes
    total: Bytes
    allocated: Bytes
    reserved: Bytes
    parameters: Bytes
    gradients: Bytes
    optimizer_state: Bytes
    other: Bytes


class Oom(TypedDict, closed=True):
    method: Literal["oom"]
    id: str
    time: float
    replay: bool
    execution_count: int | None
    cell_id: str | None
    exception_id: str | None
    exception: OomException
    device: str
    headline: str
    requested_bytes: Bytes
    message_facts: dict[str, Bytes]
    allocator: AllocatorCounters | None
    allocator_reason: str | None
    numbers: OomNumbers
    breakdown: MemoryBreakdownRow
    models: list[str]
    optimizers: list[str]
    tensors: list[OomTensor]
    tensors_total: int
    tensors_bytes: int
    summary: str | None
    summary_truncated: bool
    remedies: list[OomRemedy]
    capture_ms: float


class ActionEmptyCache(TypedDict):
    action: NotRequired[Literal["empty_cache"]]
    args: NotRequired[NoArgs]


class ActionReleaseRefs(TypedDict):
    action: NotRequired[Literal["release_refs"]]
    args: NotRequired[NoArgs]


class RecordMemoryArgsStart(TypedDict, closed=True):
    op: Literal["start"]
    max_entries: NotRequired[int]


class RecordMemoryArgsStop(TypedDict, closed=True):
    op: Literal["stop"]


class ActionRecordMemory(TypedDict):
    action: NotRequired[Literal["record_memory"]]
    args: NotRequired[RecordMemoryArgsStart | RecordMemoryArgsStop]


class SaveCheckpointArgs(TypedDict, closed=True):
    filename: NotRequired[str]
    overwrite: NotRequired[bool]


class ActionSaveCheckpoint(TypedDict):
    action: NotRequired[Literal["save_checkpoint"]]
    args: NotRequired[SaveCheckpointArgs]


class ActionClearAlerts(TypedDict):
    action: NotRequired[Literal["clear_alerts"]]
    args: NotRequired[NoArgs]


class SkipNonfiniteArgs(TypedDict, closed=True):
    on: bool


class ActionSkipNonfinite(TypedDict):
    action: NotRequired[Literal["skip_nonfinite"]]
    args: NotRequired[SkipNonfiniteArgs]


class ReplayStepArgs(TypedDict, closed=True):
    track: NotRequired[str]


class ActionReplayStep(TypedDict):
    action: NotRequired[Literal["replay_step"]]
    args: NotRequired[ReplayStepArgs]


ReplayResultWeights: TypeAlias = Literal["pre-step", "current"]


ReplayResultUserLoss: TypeAlias = Literal["same", "part", "not_rerun", "unseen"]


ReplayResultCause: TypeAlias = Literal[
    "input", "weights", "forward", "backward", "overflow", "finite"
]


class ReplayResultForwardStackItem(TypedDict):
    file: str
    line: int
    name: str
    code: str


class ReplayResult(TypedDict):
    step: int
    track: str
    root: NotRequired[str]
    weights: ReplayResultWeights
    loss_root: str | None
    user_loss: NotRequired[ReplayResultUserLoss]
    reproduces: NotRequired[bool | None]
    cause: ReplayResultCause
    backward_op: str | None
    anomaly_op: NotRequired[str | None]
    forward_op: NotRequired[str | None]
    output: str | None
    forward_stack: list[ReplayResultForwardStackItem]
    finite: bool
    no_graph: NotRequired[bool]
    message: str


class ClearHistoryArgs(TypedDict, closed=True):
    names: NotRequired[list[Name]]


class ActionClearHistory(TypedDict):
    action: NotRequired[Literal["clear_history"]]
    args: NotRequired[ClearHistoryArgs]


class ControlGroup(TypedDict, closed=True):
    index: int
    lr: NullableNumber
    initial_lr: NullableNumber
    changed: bool


class ClipArgs(TypedDict, closed=True):
    max_norm: float


class ActionClip(TypedDict):
    action: NotRequired[Literal["clip"]]
    args: NotRequired[ClipArgs]


class ActionUnclip(TypedDict):
    action: NotRequired[Literal["unclip"]]
    args: NotRequired[NoArgs]


class ActionPause(TypedDict):
    action: NotRequired[Literal["pause"]]
    args: NotRequired[NoArgs]


class ActionResume(TypedDict):
    action: NotRequired[Literal["resume"]]
    args: NotRequired[NoArgs]


class ActionStep(TypedDict):
    action: NotRequired[Literal["step"]]
    args: NotRequired[NoArgs]


class ScaleLrArgs(TypedDict, closed=True):
    factor: float
    optimizer: NotRequired[str]


class ActionScaleLr(TypedDict):
    action: NotRequired[Literal["scale_lr"]]
    args: NotRequired[ScaleLrArgs]


class ResetLrArgs(TypedDict, closed=True):
    optimizer: NotRequired[str]


class ActionResetLr(TypedDict):
    action: NotRequired[Literal["reset_lr"]]
    args: NotRequired[ResetLrArgs]


class SetLrArgs(TypedDict, closed=True):
    lr: float
    optimizer: NotRequired[str]
    group: NotRequired[int]


class ActionSetLr(TypedDict):
    action: NotRequired[Literal["set_lr"]]
    args: NotRequired[SetLrArgs]


RankIdentityLauncher: TypeAlias = Literal["spawn", "fork", "torchrun", "attach"]


class RankIdentity(TypedDict, closed=True):
    rank: int
    world_size: int
    local_rank: int | None
    host: str
    pid: int
    launcher: RankIdentityLauncher


RankStateState: TypeAlias = Literal[
    "starting", "running", "waiting", "paused", "stalled", "exited", "failed", "lost"
]


RankStateMemoryKind: TypeAlias = Literal["cuda", "host"]


RankStatePhase: TypeAlias = Literal["user", "torch_wait", "paused", "none"]


class RankState(TypedDict, closed=True):
    rank: int
    identity: NotRequired[RankIdentity]
    state: RankStateState
    step: int
    step_time_s: float | None
    own_time_s: float | None
    grad_norm: FiniteOrSpecial | None
    grad_step: int | None
    memory_bytes: int | None
    memory_kind: RankStateMemoryKind
    last_seen_s: float
    since_step_s: float | None
    clip: float | None
    lr_scale: float
    phase: RankStatePhase
    sharded: NotRequired[Literal[True]]


Step: TypeAlias = int


class RankPoints(TypedDict, closed=True):
    rank: int
    steps: list[Step]
    step_time_s: list[float | None]
    grad_norm: list[FiniteOrSpecial | None]
    memory_bytes: list[int | None]


RankAlarmKind: TypeAlias = Literal[
    "desync",
    "straggler",
    "hang",
    "failed",
    "lost",
    "action",
    "non_finite",
    "explosion",
    "vanishing",
]


RankAlarmCause: TypeAlias = Literal[
    "input", "forward", "weights", "loss", "backward", "overflow", "unknown"
]


Rank: TypeAlias = int


StackItem: TypeAlias = str


RanksInItem: TypeAlias = int


NeverEnteredItem: TypeAlias = int


class RankCollective(TypedDict, closed=True):
    op: str | None
    seq: int
    group: str
    shapes: NotRequired[str | None]
    ddp_backward: NotRequired[bool]
    ranks_in: list[RanksInItem]
    never_entered: list[NeverEnteredItem]
    source: NotRequired[str]


RankStackGroup = TypedDict(
    "RankStackGroup",
    {
        "ranks": list[Rank],
        "where": str,
        "in": str | None,
    },
    closed=True,
)


class RankPending(TypedDict, closed=True):
    action: str
    at_step: int
    request_id: RequestId


RankJobState: TypeAlias = Literal["running", "ended"]


RankJobTransport: TypeAlias = Literal["ipc", "tcp"]


class RankJobSharded(TypedDict, closed=True):
    replicas: int
    global_norm: FiniteOrSpecial | None
    global_step: int | None


class RankJob(TypedDict, closed=True):
    id: int
    started: float
    world_size: int
    state: RankJobState
    transport: RankJobTransport
    paused_at: int | None
    pending: RankPending | None
    sharded: NotRequired[RankJobSharded]


RanksEndpointTransport: TypeAlias = Literal["ipc", "tcp", "off"]


class RanksEndpoint(TypedDict, closed=True):
    transport: RanksEndpointTransport
    refused: int


class RanksClipArgs(TypedDict, closed=True):
    max_norm: float


class ActionRanksClip(TypedDict):
    action: NotRequired[Literal["ranks_clip"]]
    args: NotRequired[RanksClipArgs]


class ActionRanksUnclip(TypedDict):
    action: NotRequired[Literal["ranks_unclip"]]
    args: NotRequired[NoArgs]


class ActionRanksPause(TypedDict):
    action: NotRequired[Literal["ranks_pause"]]
    args: NotRequired[NoArgs]


class ActionRanksResume(TypedDict):
    action: NotRequired[Literal["ranks_resume"]]
    args: NotRequired[NoArgs]


class RanksScaleLrArgs(TypedDict, closed=True):
    factor: float


class ActionRanksScaleLr(TypedDict):
    action: NotRequired[Literal["ranks_scale_lr"]]
    args: NotRequired[RanksScaleLrArgs]


LeakHolderKind: TypeAlias = Literal["graph", "container", "hook", "closure"]


class LeakHolder(TypedDict, closed=True):
    name: str
    kind: LeakHolderKind
    bytes: Bytes
    count: int | None
    text: str
    fix: str | None


MemoryLeakCounter: TypeAlias = Literal["rss", "allocated", "reserved"]


MemoryLeakLimitSource: TypeAlias = Literal["cgroup", "host", "device"] | None


MemoryLeakSearch: TypeAlias = Literal["pending", "done", "budget", "failed"]


class MemoryLeak(TypedDict, closed=True):
    series: str
    counter: MemoryLeakCounter
    device: str | None
    per_step: float
    per_step_err: float
    steps: int
    run: int | None
    step: int | None
    used: Bytes
    limit: Bytes
    limit_source: MemoryLeakLimitSource
    steps_left: int | None
    holders: list[LeakHolder]
    search: MemoryLeakSearch
    search_note: str | None
    text: str


MemoryGuardLimitSource: TypeAlias = Literal["cgroup", "host", "device"] | None


class MemoryGuard(TypedDict, closed=True):
    pause_at: float | None
    limit: Bytes
    limit_source: MemoryGuardLimitSource
    tripped: str | None


class ActivationModule(TypedDict, closed=True):
    name: str
    bytes: Bytes
    tensors: int


ActivationsState: TypeAlias = Literal["armed", "done", "failed"]


ActivationsLimitSource: TypeAlias = Literal["cgroup", "host", "device"] | None


class Activations(TypedDict, closed=True):
    state: ActivationsState
    time: float
    device: str | None
    run: int | None
    step: int | None
    batch: int | None
    total: Bytes
    per_sample: Bytes
    modules: list[ActivationModule]
    free: Bytes
    limit_source: ActivationsLimitSource
    fits: int | None
    text: str


class RecordRun(TypedDict, closed=True):
    id: int
    start: float
    end: float | None
    steps: int
    alerts: int
    cell_id: str | None
    execution_count: int | None
    optimizers: list[str]


RecordEndKind: TypeAlias = Literal["running", "shutdown", "exit", "signal", "oom_kill", "unknown"]


class RecordEnd(TypedDict, closed=True):
    kind: RecordEndKind
    code: int | None
    oom_kills: int | None
    text: str


class RecordKernelMemory(TypedDict, closed=True):
    used: Bytes
    limit: Bytes
    per_step: float | None


class RecordKernelException(TypedDict, closed=True):
    ename: str
    evalue: str
    cell_id: str | None
    line: int | None
    time: float


class RecordKernel(TypedDict, closed=True):
    id: str
    started: float
    last_write: float
    end: RecordEnd
    run: int | None
    step: int | None
    memory: RecordKernelMemory | None
    text: str
    runs: list[RecordRun]
    exception: RecordKernelException | None
    dismissed: bool


RecordStore: TypeAlias = Literal["on", "off", "unavailable"]


class Record(TypedDict, closed=True):
    method: Literal["record"]
    notebook: str | None
    store: RecordStore
    kernels: list[RecordKernel]
    note: str | None


class RecordSeries(TypedDict, closed=True):
    name: str
    x: list[float]
    y: list[FiniteOrSpecial]


class SetMemoryGuardArgs(TypedDict, closed=True):
    pause_at: float | None


class ActionSetMemoryGuard(TypedDict):
    action: NotRequired[Literal["set_memory_guard"]]
    args: NotRequired[SetMemoryGuardArgs]


class ActionMeasureActivations(TypedDict):
    action: NotRequired[Literal["measure_activations"]]
    args: NotRequired[NoArgs]


class OpenRecordArgs(TypedDict, closed=True):
    kernel: str
    run: int


class ActionOpenRecord(TypedDict):
    action: NotRequired[Literal["open_record"]]
    args: NotRequired[OpenRecordArgs]


class DismissRecordArgs(TypedDict, closed=True):
    kernel: str


class ActionDismissRecord(TypedDict):
    action: NotRequired[Literal["dismiss_record"]]
    args: NotRequired[DismissRecordArgs]


class ExportTensorboardArgs(TypedDict, closed=True):
    run: int
    kernel: str | None


class ActionExportTensorboard(TypedDict):
    action: NotRequired[Literal["export_tensorboard"]]
    args: NotRequired[ExportTensorboardArgs]


class SnapshotResult(TypedDict, closed=True):
    series: int


class ClearHistoryResult(TypedDict, closed=True):
    cleared: int


SetStrideResultMode: TypeAlias = Literal["auto", "fixed", "off"]


class SetStrideResult(TypedDict, closed=True):
    mode: SetStrideResultMode
    stride: int | None


class SetThresholdsResult(TypedDict, closed=True):
    thresholds: GradThresholds


class ClearAlertsResult(TypedDict, closed=True):
    cleared: int


class SkipNonfiniteResult(TypedDict, closed=True):
    on: bool


class ClipResult(TypedDict, closed=True):
    clip: float
    applies: str


class UnclipResult(TypedDict, closed=True):
    clip: None


class PauseResult(TypedDict, closed=True):
    paused: Literal[True]
    applies: str


class ResumeResult(TypedDict, closed=True):
    paused: Literal[False]


class StepResult(TypedDict, closed=True):
    step: str


class ScaleLrResult(TypedDict, closed=True):
    optimizer: str
    pending: Literal[True]
    applies: str
    lr_scale: float


class ResetLrResult(TypedDict, closed=True):
    optimizer: str
    lr_scale: None
    applies: str


class SetLrResult(TypedDict, closed=True):
    optimizer: str
    pending: Literal[True]
    applies: str
    lr: float


class RanksAtStepResult(TypedDict, closed=True):
    at_step: int
    ranks: list[int]


class RanksResumeResult(TypedDict, closed=True):
    ranks: list[int]


class CacheDeviceResult(TypedDict, closed=True):
    device: str
    allocated_before: int
    allocated_after: int
    reserved_before: int
    reserved_after: int


class EmptyCacheResult(TypedDict, closed=True):
    devices: list[CacheDeviceResult]
    freed_bytes: int


class ReleaseRefsResult(TypedDict, closed=True):
    cleared: list[
        Literal[
            "sys.last_traceback",
            "sys.last_value",
            "sys.last_type",
            "sys.last_exc",
            "InteractiveTB.tb",
            "last_execution_result",
            "Out/_/__/___",
        ]
    ]
    collected: int
    devices: list[CacheDeviceResult]
    rss_before: Bytes
    rss_after: Bytes
    note: str


class RecordMemoryResultOn(TypedDict, closed=True):
    state: Literal["on"]
    max_entries: int
    since: float
    note: NotRequired[str]


class RecordMemoryResultArmed(TypedDict, closed=True):
    state: Literal["armed"]
    max_entries: int
    since: None
    note: str


class RecordMemoryResultNothing(TypedDict, closed=True):
    state: Literal["off"]
    max_entries: None
    since: None
    note: str


class RecordMemoryResultSnapshot(TypedDict, closed=True):
    state: Literal["off"]
    max_entries: None
    since: None
    time: float
    file: str
    bytes: int
    entries: int
    oom_events: int
    top_sites: list[AllocationSite]
    live_sites: list[AllocationSite]


RecordMemoryResult: TypeAlias = (
    RecordMemoryResultOn
    | RecordMemoryResultArmed
    | RecordMemoryResultNothing
    | RecordMemoryResultSnapshot
)


class SaveCheckpointResult(TypedDict, closed=True):
    file: str
    bytes: int
    models: list[str]
    optimizers: list[str]
    overwritten: bool


class SetMemoryGuardResult(TypedDict, closed=True):
    guard: MemoryGuard


MeasureActivationsResultState: TypeAlias = Literal["armed", "done", "failed"]


class MeasureActivationsResult(TypedDict, closed=True):
    state: MeasureActivationsResultState


class OpenRecordResult(TypedDict, closed=True):
    series: int
    alerts: int


DismissRecordResult: TypeAlias = dict[str, Any]


class ExportTensorboardResult(TypedDict, closed=True):
    path: str
    scalars: int


class UnwrappedError(TypedDict, closed=True):
    where: str
    worker_id: int | None
    pid: int | None
    exception: ExceptionInfo
    index_known: bool
    index: int | str | list[Any] | dict[str, Any] | None
    batch: list[Any] | None
    batch_size: int | None
    dataset: str | None
    frame: int | None
    why_unknown: str | None


class ExceptionFrame(TypedDict):
    position: int
    origin: ExceptionFrameOrigin
    user: bool
    function: str
    file: str
    path: NotRequired[str]
    lineno: int
    cell_id: NotRequired[str | None]
    execution_count: NotRequired[int | None]
    source_changed: NotRequired[bool]
    line: str
    source: NotRequired[ExceptionFrameSource]
    span: NotRequired[ExceptionFrameSpan]
    namespace: NotRequired[bool]
    process: NotRequired[str]
    locals: list[Local]
    locals_total: int
    locals_truncated: bool


class Action1(TypedDict, closed=True):
    action: Literal["snapshot"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action2(TypedDict, closed=True):
    action: Literal["clear_history"]
    args: ClearHistoryArgs
    method: Literal["action"]
    request_id: RequestId


class Action3(TypedDict, closed=True):
    action: Literal["set_stride"]
    args: SetStrideArgs
    method: Literal["action"]
    request_id: RequestId


class Action4(TypedDict, closed=True):
    action: Literal["set_thresholds"]
    args: SetThresholdsArgs
    method: Literal["action"]
    request_id: RequestId


class Action5(TypedDict, closed=True):
    action: Literal["clear_alerts"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action6(TypedDict, closed=True):
    action: Literal["replay_step"]
    args: ReplayStepArgs
    method: Literal["action"]
    request_id: RequestId


class Action7(TypedDict, closed=True):
    action: Literal["skip_nonfinite"]
    args: SkipNonfiniteArgs
    method: Literal["action"]
    request_id: RequestId


class Action8(TypedDict, closed=True):
    action: Literal["empty_cache"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action9(TypedDict, closed=True):
    action: Literal["release_refs"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action10(TypedDict, closed=True):
    action: Literal["record_memory"]
    args: dict[str, RecordMemoryArgsStart | RecordMemoryArgsStop]
    method: Literal["action"]
    request_id: RequestId


class Action11(TypedDict, closed=True):
    action: Literal["save_checkpoint"]
    args: SaveCheckpointArgs
    method: Literal["action"]
    request_id: RequestId


class Action12(TypedDict, closed=True):
    action: Literal["clip"]
    args: ClipArgs
    method: Literal["action"]
    request_id: RequestId


class Action13(TypedDict, closed=True):
    action: Literal["unclip"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action14(TypedDict, closed=True):
    action: Literal["pause"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action15(TypedDict, closed=True):
    action: Literal["resume"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action16(TypedDict, closed=True):
    action: Literal["step"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action17(TypedDict, closed=True):
    action: Literal["scale_lr"]
    args: ScaleLrArgs
    method: Literal["action"]
    request_id: RequestId


class Action18(TypedDict, closed=True):
    action: Literal["reset_lr"]
    args: ResetLrArgs
    method: Literal["action"]
    request_id: RequestId


class Action19(TypedDict, closed=True):
    action: Literal["set_lr"]
    args: SetLrArgs
    method: Literal["action"]
    request_id: RequestId


class Action20(TypedDict, closed=True):
    action: Literal["ranks_clip"]
    args: RanksClipArgs
    method: Literal["action"]
    request_id: RequestId


class Action21(TypedDict, closed=True):
    action: Literal["ranks_unclip"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action22(TypedDict, closed=True):
    action: Literal["ranks_pause"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action23(TypedDict, closed=True):
    action: Literal["ranks_resume"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action24(TypedDict, closed=True):
    action: Literal["ranks_scale_lr"]
    args: RanksScaleLrArgs
    method: Literal["action"]
    request_id: RequestId


class Action25(TypedDict, closed=True):
    action: Literal["set_memory_guard"]
    args: SetMemoryGuardArgs
    method: Literal["action"]
    request_id: RequestId


class Action26(TypedDict, closed=True):
    action: Literal["measure_activations"]
    args: NoArgs
    method: Literal["action"]
    request_id: RequestId


class Action27(TypedDict, closed=True):
    action: Literal["open_record"]
    args: OpenRecordArgs
    method: Literal["action"]
    request_id: RequestId


class Action28(TypedDict, closed=True):
    action: Literal["dismiss_record"]
    args: DismissRecordArgs
    method: Literal["action"]
    request_id: RequestId


class Action29(TypedDict, closed=True):
    action: Literal["export_tensorboard"]
    args: ExportTensorboardArgs
    method: Literal["action"]
    request_id: RequestId


Action: TypeAlias = (
    Action1
    | Action2
    | Action3
    | Action4
    | Action5
    | Action6
    | Action7
    | Action8
    | Action9
    | Action10
    | Action11
    | Action12
    | Action13
    | Action14
    | Action15
    | Action16
    | Action17
    | Action18
    | Action19
    | Action20
    | Action21
    | Action22
    | Action23
    | Action24
    | Action25
    | Action26
    | Action27
    | Action28
    | Action29
)


class AlertItem(TypedDict, closed=True):
    id: str
    source: str
    kind: AlertItemKind
    cause: NotRequired[AlertItemCause]
    replay: NotRequired[ReplayResult]
    severity: AlertItemSeverity
    step: int
    layer: str | None
    message: str
    remedy: str
    track: str
    value: NullableNumber
    time: float
    run: NotRequired[int]


class Alert(TypedDict, closed=True):
    method: Literal["alert"]
    alerts: list[AlertItem]
    replay: NotRequired[bool]


class MemoryRecording(TypedDict, closed=True):
    state: MemoryRecordingState
    max_entries: int | None
    since: float | None
    last: NotRequired[MemorySnapshotSummary | None]


class Memory(TypedDict, closed=True):
    method: Literal["memory"]
    time: float
    state: MemoryState
    reason: str | None
    devices: list[MemoryDevice]
    host: MemoryHost
    breakdown: MemoryBreakdown | None
    recording: MemoryRecording
    last_oom: MemoryLastOom | None
    nvml: MemoryNvml
    leak: NotRequired[MemoryLeak | None]
    guard: NotRequired[MemoryGuard]
    activations: NotRequired[Activations | None]


class ControlTarget(TypedDict, closed=True):
    key: str
    name: str
    stepping: bool
    by_hand: bool
    groups: list[ControlGroup]


class RankAlarm(TypedDict, closed=True):
    id: str
    kind: RankAlarmKind
    rank: int
    step: int | None
    time: float
    message: str
    layer: NotRequired[str | None]
    cause: NotRequired[RankAlarmCause]
    ranks: NotRequired[list[Rank]]
    remedy: NotRequired[str | None]
    stack: list[StackItem]
    stack_user: NotRequired[int]
    collective: NotRequired[RankCollective]
    merged: NotRequired[list[RankStackGroup]]


class Ranks(TypedDict, closed=True):
    method: Literal["ranks"]
    replay: bool
    job: RankJob | None
    ranks: list[RankState]
    points: list[RankPoints]
    alarms: list[RankAlarm]
    endpoint: RanksEndpoint


class RecordRunData(TypedDict, closed=True):
    method: Literal["record_run"]
    kernel: str
    run: int
    info: RecordRun
    series: list[RecordSeries]
    alerts: list[AlertItem]


PanelMessage: TypeAlias = Open | Action


class Exception(TypedDict, closed=True):
    method: Literal["exception"]
    id: str
    time: float
    replay: bool
    execution_count: int | None
    cell_id: str | None
    debuggable: bool
    exception: ExceptionInfo
    diagnosis: Diagnosis
    frames: list[ExceptionFrame]
    focus: int | None
    frames_total: int
    elided: list[ExceptionElidedItem]
    chain: list[RelatedException]
    group: NotRequired[list[RelatedException]]
    truncated: bool
    capture_ms: NotRequired[float]
    rank: NotRequired[RankIdentity]
    unwrapped: NotRequired[UnwrappedError]


class Control(TypedDict, closed=True):
    method: Literal["control"]
    clip: float | None
    paused: bool
    paused_at: int | None
    step: int
    lr_scale: float | None
    optimizers: list[str]
    last_refusal: str | None
    idle: NotRequired[bool]
    run: NotRequired[int | None]
    targets: NotRequired[list[ControlTarget]]
    target: NotRequired[str | None]


KernelMessage: TypeAlias = (
    Hello
    | Snapshot
    | Series
    | Ack
    | Error
    | Exception
    | Grads
    | Alert
    | Memory
    | Oom
    | Control
    | Runs
    | Ranks
    | Loaded
    | Record
    | RecordRunData
)


JupyterlabTorchdbgCommProtocol: TypeAlias = KernelMessage | PanelMessage
