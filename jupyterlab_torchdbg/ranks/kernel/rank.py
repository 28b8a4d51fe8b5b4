"""One rank of a torch.distributed job as the kernel sees it (``job.py`` holds the job).

Each ``Rank`` keeps its last ``RING`` points (step, step time, total gradient norm,
memory), the points not yet sent to the panels, the norms and per-layer norms of its last
sampled steps (the desync check compares them across ranks, ``alarms.py``) and what its
heartbeats said (phase, stack, collective). ``RankState`` (PROTOCOL.md "Ranks") is
computed from that and the kernel's clock: a rank that stopped stepping is ``waiting``
while its training thread is inside torch (the others are late), ``stalled`` after the
hang threshold in its own code, ``lost`` after ``lost_s`` without any message. The norms
as they travel are read with ``norms.py``.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from ...kernel.grads.naming import MAX_LAYERS as NAMING_MAX_LAYERS
from ...protocol.json_types import JsonObject, JsonValue
from ..wire import messages as w
from ..wire.signals import finding_of, signal_of, wire_int, wire_num
from .hang_diag import Collective, collective_of
from .norms import wire_norm
from .sent_layers import read_layers

if TYPE_CHECKING:
    from ...protocol import messages as m

#: Points kept per rank (the panel's per-rank charts).
RING = 2000
#: No message at all from a rank for this long: lost.
LOST_S = 10.0
#: Steps whose times make the step time (median).
RECENT = 20
#: Sampled steps whose norms / layers are kept for the cross-rank comparison.
KEEP_STEPS = 64
#: Per-layer norms kept of a worker's ``layers`` (model order; a worker names layers
#: with the kernel's naming, which merges layers past this many).
MAX_LAYERS_IN = NAMING_MAX_LAYERS
#: A rank not stepping for this many of its step times (and >= 1 s) is no longer running.
LATE_FACTOR = 3.0

TERMINAL = ("exited", "failed", "lost")
#: A rank's diagnoses / detector alerts kept until the alarms take them.
MAX_SIGNALS = 16
#: One point: (step, step time s | None, norm as on the wire, memory bytes | None).
Point = tuple[int, float | None, float | str | None, int | None]


@dataclass
class Rank:
    """One worker process of the job."""

    worker: bytes
    identity: m.RankIdentity
    seen_at: float
    torch: str = ""
    #: "exited" / "failed" once the process ended (bye or exception).
    ended: str | None = None
    step: int = 0
    #: The last step its ``rows`` reported (a heartbeat may tell of later steps first).
    row_step: int = 0
    step_at: float | None = None
    dts: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    owns: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    norm: float | str | None = None
    norm_step: int | None = None
    mem: int | None = None
    mem_kind: str = "host"
    phase: str = "none"
    stack: list[str] | None = None
    #: Which of ``stack``'s frames are the user's (None: the worker did not say).
    stack_user: list[bool] | None = None
    #: The collectives it is in or finished last, per group (hang_diag.py; with the stack).
    collective: Collective | None = None
    #: The sampled steps' layers as sent (names, norms: a list or ``packed``), newest
    #: last, read and checked only when asked (``layers_at``: the desync check names the
    #: first layer that differs), not in every report (issue #25).
    _layers_sent: OrderedDict[int, tuple[JsonValue, JsonValue]] = field(default_factory=OrderedDict)
    #: (layout, names) of its last report to name its layers (worker/cadence.py).
    _names: tuple[JsonValue, JsonValue] = (None, None)
    #: ``layers_at``'s reads, by step (None: they did not check).
    _layers_read: dict[int, w.Layers | None] = field(default_factory=dict)
    norms_by_step: OrderedDict[int, float | str] = field(default_factory=OrderedDict)
    points: deque[Point] = field(default_factory=lambda: deque(maxlen=RING))
    new_points: deque[Point] = field(default_factory=lambda: deque(maxlen=RING))
    clip: float | None = None
    lr_scale: float = 1.0
    #: (step, finding) of non-finite steps this rank diagnosed (rank_signals.py), not
    #: yet taken by the alarms (grad_alarms.py); its explosion / vanishing alerts.
    findings: deque[tuple[int, JsonObject]] = field(
        default_factory=lambda: deque(maxlen=MAX_SIGNALS)
    )
    #: The checked signals (wire/signals.py ``signal_of``), read by grad_alarms.py.
    signals: deque[JsonObject] = field(default_factory=lambda: deque(maxlen=MAX_SIGNALS))
    #: The last step its detector (explosion, vanishing) has judged.
    checked: int = 0
    #: Sharded gradients (FSDP): how many ranks hold each of its shards; its norms are
    #: its shards' (None: whole gradients, every replica's norm is the global one).
    replicas: int | None = None
    #: Seconds between its ``rows`` the kernel asked for (aggregator.cadence): a rank
    #: is late only after two of them without a step.
    report_s: float = 0.1
    #: ``step_time``'s cache: the median, for how many times, after how many added.
    _step_time: float | None = None
    _step_time_n: int = 0
    #: ``own_time``'s cache, by ``last``: (what it was computed from, the median).
    _own_times: dict[int, tuple[tuple[int, int, int, float | None], float | None]] = field(
        default_factory=dict
    )
    _step_time_last: int = -1
    _dts_added: int = 0

    #: ``number``'s cache: the identity it was read from, and the number.
    _number_of: m.RankIdentity | None = field(default=None, repr=False)
    _number: int = 0

    @property
    def number(self) -> int:
        """Its rank number (read once per identity: it is asked for every rank on every
        look of the flusher)."""
        identity = self.identity
        if identity is not self._number_of:
            self._number = int(identity.get("rank", 0))
            self._number_of = identity
        return self._number

    def step_time(self) -> float | None:
        """The median of the recent step times (computed once per ``rows``: the state of
        every rank is read on every flush)."""
        if self._step_time_n != len(self.dts) or self._step_time_last != self._dts_added:
            self._step_time = statistics.median(self.dts) if self.dts else None
            self._step_time_n, self._step_time_last = len(self.dts), self._dts_added
        return self._step_time

    def own_time(self, last: int = RECENT) -> float | None:
        """The median of the last ``last`` own times (cached like ``step_time``: it is
        read for every rank in every ``ranks`` message)."""
        owns = self.owns
        key = (last, self._dts_added, len(owns), owns[-1] if owns else None)
        cached = self._own_times.get(last)
        if cached is not None and cached[0] == key:
            return cached[1]
        recent = list(owns)[-last:]
        value = statistics.median(recent) if recent else None
        self._own_times[last] = (key, value)
        return value

    @property
    def lost_s(self) -> float:
        """Seconds without a message before it is lost: ``LOST_S``, or three of the
        intervals it was asked to report at (a large world's ranks report less often)."""
        return max(LOST_S, 3.0 * self.report_s)

    def since_step(self, now: float) -> float | None:
        return None if self.step_at is None else max(0.0, now - self.step_at)

    def state(self, now: float, hang_s: float) -> str:
        if self.ended is not None:
            return self.ended
        if now - self.seen_at >= self.lost_s:
            return "lost"
        if self.phase == "paused":
            return "paused"
        since = self.since_step(now)
        if self.step == 0 or since is None:
            return "starting"
        late = max(1.0, LATE_FACTOR * (self.step_time() or 0.0))
        if self.stack is None:
            # between two reports the kernel cannot tell: two of them missed, at least;
            # a heartbeat with a stack (``hang_s`` without a step, by the rank's own
            # clock; gone with the next step) needs no such margin
            late = max(late, 2 * self.report_s)
        if since >= late:
            if self.phase == "torch_wait":
                return "waiting"
            if since >= hang_s:
                return "stalled"
        return "running"

    def to_json(
        self,
        now: float,
        hang_s: float,
        identity: bool = True,
        state: str | None = None,
    ) -> m.RankState:
        """Its ``RankState``; without ``identity`` when the panels have it already
        (panels.py: a broadcast above ``COMPACT_ABOVE`` ranks). ``state``: its state at
        ``now`` when the caller has just read it (the flusher's tick)."""
        since = None if self.step_at is None else max(0.0, now - self.step_at)
        step_time, own_time = self.step_time(), self.own_time()
        out: dict[str, object] = {
            "rank": self.number,
            "state": self.state(now, hang_s) if state is None else state,
            "step": self.step,
            "step_time_s": None if step_time is None else round(step_time, 6),
            "own_time_s": None if own_time is None else round(own_time, 6),
            "grad_norm": self.norm,
            "grad_step": self.norm_step,
            "memory_bytes": self.mem,
            "memory_kind": self.mem_kind,
            "last_seen_s": round(max(0.0, now - self.seen_at), 3),
            "since_step_s": None if since is None else round(since, 3),
            "clip": self.clip,
            "lr_scale": self.lr_scale,
            "phase": self.phase if self.ended is None else "none",
        }
        if identity:
            out["identity"] = dict(self.identity)
        if self.replicas is not None:
            out["sharded"] = True
        # a RankState: ``state``, ``phase`` and ``memory_kind`` come from their fixed sets
        # (``state``, ``add_rows``, ``heartbeat``), the norm from ``wire_norm``
        return cast("m.RankState", out)

    # --- feeding ------------------------------------------------------------------------

    def add_rows(self, content: JsonObject, now: float) -> list[int]:
        """A ``rows`` batch; returns the sampled steps that carried a norm. Every field is
        checked as ``wire_int`` / ``wire_num`` / ``wire_norm`` check it, the usual JSON
        types first (this runs for every worker message: issue #25)."""
        own = wire_num(content.get("own"))
        phase = content.get("phase")
        if phase in ("user", "torch_wait", "paused"):
            self.phase = str(phase)
        sampled: list[int] = []
        rows = content.get("rows")
        points, new_points, dts, owns = self.points, self.new_points, self.dts, self.owns
        own_share = None if own is None else min(1.0, max(0.0, own))
        for row in rows if isinstance(rows, list) else []:
            if not isinstance(row, dict):
                continue
            get = row.get
            step = get("step")
            if type(step) is not int:
                step = wire_int(step, 1)
                if step is None:
                    continue
            elif step < 1:
                continue
            dt = get("dt")
            if type(dt) is float:
                dt = dt if dt >= 0 and dt - dt == 0.0 else None  # finite, not negative
            else:
                dt = wire_num(dt)
                dt = dt if dt is not None and dt >= 0 else None
            norm = get("norm")
            if type(norm) is not float or norm - norm != 0.0:  # else a finite float
                norm = wire_norm(norm)
            mem = get("mem")
            if type(mem) is not int or mem < 0:
                mem = wire_int(mem)
            kind = get("mem_kind")
            if kind is not None and kind in ("cuda", "host"):
                self.mem_kind = str(kind)
            if step > self.row_step:
                self.row_step = step
            if step > self.step:
                self.step = step
                self.step_at = now
                self.stack = self.collective = None
            if dt is not None:
                dts.append(dt)
                self._dts_added += 1
                if own_share is not None:
                    owns.append(dt * own_share)
            replicas = get("replicas")
            if replicas is not None:
                replicas = wire_int(replicas, 1)
                if replicas is not None:
                    self.replicas = min(replicas, 65536)
            if norm is not None:
                self.norm, self.norm_step = norm, step
                norms = self.norms_by_step
                late = bool(norms) and step < next(reversed(norms))
                norms[step] = norm
                if late:  # kept in step order (the desync check reads them newest first)
                    norms = self.norms_by_step = OrderedDict(sorted(norms.items()))
                while len(norms) > KEEP_STEPS:
                    norms.popitem(last=False)
                sampled.append(step)
            if mem is not None:
                self.mem = mem
            nonfinite = get("nonfinite")
            if nonfinite is not None:
                finding = finding_of(nonfinite)
                if finding is not None:
                    self.findings.append((step, finding))
            point: Point = (step, dt, norm, mem)
            points.append(point)
            new_points.append(point)
        signals = content.get("signals")
        for raw in signals[:MAX_SIGNALS] if isinstance(signals, list) else []:
            signal = signal_of(raw)
            if signal is not None:
                self.signals.append(signal)
        checked = wire_int(content.get("checked"))
        if checked is not None:
            self.checked = max(self.checked, checked)
        layers = content.get("layers")
        if isinstance(layers, dict):
            step = wire_int(layers.get("step"), 1)
            values = layers.get("packed", layers.get("norms"))
            names, layout = layers.get("names"), layers.get("layout")
            if names is not None:
                self._names = (layout, names)
            elif layout is not None and layout == self._names[0]:
                names = self._names[1]  # (that layout's, none other's: R56)
            if step is not None and values is not None and names is not None:
                # kept as sent; read when asked (``layers_at``)
                sent = self._layers_sent
                sent[step] = (names, values)
                sent.move_to_end(step)
                self._layers_read.pop(step, None)
                while len(sent) > KEEP_STEPS // 4:
                    self._layers_read.pop(sent.popitem(last=False)[0], None)
        return sampled

    def layers_at(self, step: int) -> w.Layers | None:
        """Its layers at a sampled step, in model order as sent (the desync check names
        the first that differs), read and checked on first use: names (strings of at most
        512 characters) and norms (``wire_norm``'s) of one length, at most
        ``MAX_LAYERS_IN``; None when it sent none for that step or they do not check."""
        read = self._layers_read
        if step in read:
            return read[step]
        sent = self._layers_sent.get(step)
        if sent is None:
            return None
        found = read[step] = read_layers(step, *sent, MAX_LAYERS_IN)
        return found

    def heartbeat(self, content: JsonObject, now: float) -> bool:
        """A heartbeat; True when it changed what the panel shows (phase, step, stack)."""
        before = (self.phase, self.step, self.stack is not None)
        phase = content.get("phase")
        if phase in ("user", "torch_wait", "paused"):
            self.phase = str(phase)
        step = wire_int(content.get("step"))
        since = wire_num(content.get("since_step_s"))
        if step is not None and step > self.step:
            self.step = step
        if since is not None and since >= 0 and self.step > 0:
            self.step_at = now - since
        stack = content.get("stack")
        if isinstance(stack, list) and all(isinstance(s, str) for s in stack):
            strings = cast("list[str]", stack)  # every one a str: checked above
            self.stack = [s[:1000] for s in strings[-64:]]
            user = content.get("stack_user")
            if isinstance(user, list) and len(user) == len(stack):
                self.stack_user = [u is True for u in user[-64:]]
            else:
                self.stack_user = None
            self.collective = collective_of(content.get("collective"))
        return before != (self.phase, self.step, self.stack is not None)

    def take_points(self, replay: bool, newest: bool = False) -> m.RankPoints | None:
        """The RankPoints of the new points (taken: the next call has only later ones), or
        of every kept point when ``replay`` (new points stay new: a replay goes to one
        panel, and the next broadcast may repeat some; panels drop steps they have)."""
        pts = list(self.points) if replay else list(self.new_points)
        if not replay:
            self.new_points.clear()
            if newest:
                pts = pts[-1:]
        if not pts and not replay:
            return None
        return {
            "rank": self.number,
            "steps": [p[0] for p in pts],
            "step_time_s": [_round(p[1]) for p in pts],
            # as ``wire_norm`` gave them: a float or one of its three strings
            "grad_norm": [cast("m.FiniteOrSpecial | None", p[2]) for p in pts],
            "memory_bytes": [p[3] for p in pts],
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)
