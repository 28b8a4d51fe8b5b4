"""The rank wire's messages as types: one TypedDict per ``$defs`` entry of
wire.schema.json beside this file (tests/test_ranks_wire_types.py holds each one's keys,
required and optional, equal to the schema's), and the shapes the schema leaves open
that the worker fills (a row's ``nonfinite``, the ``signals``, a heartbeat's
``collective``).

Written by hand: the schema is small, and each kind's sender builds it in one place
(ranks/worker/). What the kernel receives is decoded JSON (``JsonObject``) until it has
checked it field by field (ranks/kernel/rank.py, wire/signals.py).
"""

# (no ``from __future__ import annotations``: the test reads each TypedDict's required
# keys at run time, which needs its NotRequired[...] evaluated)
from typing import Literal, TypeAlias

from typing_extensions import NotRequired, TypedDict

#: A float JSON cannot carry goes as one of these strings (transport.finite_or_special).
Num: TypeAlias = float | str
Phase: TypeAlias = Literal["user", "torch_wait", "paused"]
Launcher: TypeAlias = Literal["spawn", "fork", "torchrun", "attach"]


class Envelope(TypedDict):
    wire: int
    job: str
    sender: str
    seq: int


class Identity(TypedDict):
    rank: int
    world_size: int
    local_rank: NotRequired[int | None]
    host: str
    pid: int
    launcher: Launcher


class Hello(TypedDict):
    identity: Identity
    job_key: str
    torch: str
    cell: NotRequired[str | None]
    wire: int
    package: str


class Finding(TypedDict):
    """A row's ``nonfinite``: the rank's diagnosis of a non-finite step."""

    cause: str
    layer: str | None
    message: str
    rerun: NotRequired[bool]
    why_not_rerun: NotRequired[str | None]
    batch_finite: NotRequired[bool]
    loss_checked: NotRequired[bool]


class Signal(TypedDict):
    """One explosion / vanishing alert of the rank's detector."""

    kind: str
    step: int
    layer: str | None
    message: str
    remedy: str | None
    value: float | None


class Row(TypedDict):
    step: int
    t: float
    dt: float | None
    norm: Num | None
    mem: int | None
    mem_kind: str
    nonfinite: NotRequired[Finding]
    replicas: NotRequired[int]


class Layers(TypedDict):
    step: int
    #: ``packed.layout_of(names)``: the names are sent only when the kernel may lack them.
    layout: NotRequired[str]
    names: NotRequired[list[str]]
    #: The norms as numbers (``finite_or_special``), or
    norms: NotRequired[list[Num]]
    #: ... as ``packed.pack`` writes them: what a worker sends.
    packed: NotRequired[str]


class Rows(TypedDict):
    rows: list[Row]
    layers: Layers | None
    own: float | None
    phase: str
    signals: list[Signal]
    checked: int


CollectiveGroup = TypedDict(
    "CollectiveGroup",
    {
        "op": str | None,
        "seq": int,
        "group": str,
        "shapes": str | None,
        "in": bool,
        "since_s": float | None,
        "ranks": list[int] | None,
    },
)


class Collective(TypedDict):
    """A heartbeat's ``collective``: the newest collective of each process group."""

    source: Literal["flight_recorder", "sequence"]
    groups: list[CollectiveGroup]
    backward: NotRequired[bool]


class Heartbeat(TypedDict):
    step: int
    since_step_s: float | None
    phase: str
    stack: list[str] | None
    stack_user: NotRequired[list[bool]]
    collective: NotRequired[Collective | None]


class Ack(TypedDict):
    action_id: str
    ok: bool
    reason: str | None
    step: int


class Applied(TypedDict):
    action_id: str
    step: int


# ``exception`` is the panel's exception body (kernel/exceptions/capture, a
# ``dict[str, object]``) and the step: sent as that dict, its type here for the schema.
class ExceptionMsg(TypedDict):
    exception: dict[str, object]
    step: int


class Bye(TypedDict):
    state: Literal["exited", "failed"]


#: The largest ``row_stride`` a ``config`` asks (wire.schema.json's maximum): the kernel
#: asks no more (kernel/scale.py), a worker takes no more (worker/cadence.py).
MAX_ROW_STRIDE = 64


class Config(TypedDict):
    hang_s: float
    rows_s: NotRequired[float]
    heartbeat_s: NotRequired[float]
    row_stride: NotRequired[int]


class Prepare(TypedDict):
    action_id: str
    action: str
    args: dict[str, object]
    at_step: int


class Commit(TypedDict):
    action_id: str


class Cancel(TypedDict):
    action_id: str


class Resume(TypedDict):
    pass


class Refused(TypedDict):
    reason: str


#: wire.schema.json's ``$defs`` name -> its TypedDict (the test's list).
BY_SCHEMA: dict[str, type] = {
    "Envelope": Envelope,
    "Identity": Identity,
    "hello": Hello,
    "Row": Row,
    "rows": Rows,
    "heartbeat": Heartbeat,
    "ack": Ack,
    "applied": Applied,
    "exception": ExceptionMsg,
    "bye": Bye,
    "config": Config,
    "prepare": Prepare,
    "commit": Commit,
    "cancel": Cancel,
    "resume": Resume,
    "refused": Refused,
}
