"""Gradient alerts: what an alarm says (``Alert``, its remedy) and the log that keeps them.

``AlertLog`` keeps the recent alerts for the snapshot (R06) and hands out new ones at most
``MAX_ALERT_MESSAGES_PER_S`` times a second; the detectors that raise them are in
alarms.py and divergence.py (the logged loss), the forward probe's in probe.py.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

#: Alerts kept for snapshots.
ALERT_HISTORY = 100
#: ``alert`` messages at most this often (a burst is sent together).
MAX_ALERT_MESSAGES_PER_S = 2.0

_ids = itertools.count(1)


@dataclass
class Alert:
    kind: str
    severity: str
    step: int
    layer: str | None
    message: str
    remedy: str
    track: str
    value: float | None = None
    id: str = field(default_factory=lambda: f"grads-{next(_ids)}")
    source: str = "grads"
    time: float = field(default_factory=time.time)
    #: The run it was raised in (runs.py); ``step`` is the step within that run.
    run: int | None = None

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        if self.run is None:
            del out["run"]
        v = self.value
        if v is not None and not math.isfinite(v):
            out["value"] = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
        return out


REMEDY = {
    "non_finite": "Lower the learning rate or clip gradients "
    "(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)); if the loss is NaN, look "
    "for log(0), division by zero or an fp16 overflow in the forward pass.",
    "non_finite_loss": "The loss itself is NaN/Inf: check the inputs and labels of this "
    "batch, the loss for log(0) or division by zero, and lower the learning rate if the "
    "weights have blown up.",
    "explosion": "Clip gradients (torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)) "
    "or lower the learning rate.",
    # While the panel's clip action is on, the norms shown are before clipping: clipping
    # is what the user already has, so the advice is about why the norm exploded.
    "explosion_clipping": "Clipping is on, so the update stayed bounded: the norm before "
    "clipping is what exploded. Lower the learning rate (or warm it up), and check this "
    "step's batch for outliers or bad labels.",
    "non_finite_clipping": "Clipping is on and cannot help here (clipping a NaN/Inf "
    "gradient gives NaN). Check this step's batch and labels, the loss for log(0) or "
    "division by zero, an fp16 overflow in the forward pass, and lower the learning rate.",
    # The loop clips by itself and its norms are read after its clip: what exploded is
    # what the clip let through (the explosion's message names the clip and its bound).
    "explosion_user_clip": "Your own clip let this norm through: its bound is far above "
    "this run's norms. Lower the learning rate (or warm it up), lower the clip's bound "
    "nearer the usual norm, and check this step's batch for outliers or bad labels.",
    # The gradient norm held far above its level, or the first update moved the weights
    # by more than their own size: the learning rate, not a spike; clipping hides it.
    "divergence_grads": "The learning rate is far too high for this model and optimizer: "
    "lower it 10x (or warm it up from a small value). Clipping would only bound the "
    "steps of a run that is already diverging.",
    "divergence": "The loss jumped far above its level: the learning rate is far too high "
    "for this model and optimizer (lower it 10x, or warm it up), or this batch or its "
    "labels are broken (check the data at this step).",
    "vanishing": "Use ReLU/GELU instead of sigmoid/tanh, add residual connections or "
    "normalisation layers, or check for a detached or frozen branch.",
    "amp_skips": "GradScaler keeps finding inf/NaN: use bf16 autocast, lower the learning "
    "rate, or look for an overflow in the forward pass.",
    "amp_scale_collapse": "The gradients overflow even at a tiny loss scale: look for a "
    "NaN source in the forward pass, use bf16 autocast, or lower the learning rate.",
}


@dataclass(frozen=True)
class Clipping:
    """What clips a track's gradients, as far as the monitor knows: for the messages
    (which norm was read) and the remedies (never advise a clip that is there)."""

    #: The panel's clip action is on (the norms are read before it clips).
    action: bool = False
    #: The clip the loop calls itself on these parameters ("clip_grad_norm_" or
    #: "clip_grad_value_", seen at its call: step_boundary.py), and its bound.
    user: str | None = None
    user_bound: float | None = None
    #: The norms were read after the loop's own clip (an optimizer step comes after it;
    #: a loop without torch.optim is read at its clip_grad_norm_).
    after_user: bool = True
    #: The steps the panel's clip action was on at ((first, last), last None: still on),
    #: where known: rows are judged after their step, by which time it may have changed.
    action_spans: tuple[tuple[int, int | None], ...] | None = None

    def at(self, step: int) -> Clipping:
        """As it was at ``step``: the clip action on only if it was on at that step."""
        if self.action_spans is None:
            return self
        on = any(a <= step and (b is None or step <= b) for a, b in self.action_spans)
        return self if on == self.action else replace(self, action=on)

    @property
    def any(self) -> bool:
        return self.action or self.user is not None

    def read_note(self) -> str:
        """Which norm a message quotes: `` (before clipping)``, `` after your
        clip_grad_norm_(max_norm=0.25)``, or nothing."""
        if self.action:
            return " (before clipping)"
        if self.user is None:
            return ""
        arg = "max_norm" if self.user == "clip_grad_norm_" else "clip_value"
        bound = f"{arg}={self.user_bound:g}" if self.user_bound is not None else ""
        where = "after" if self.after_user else "before"
        return f" ({where} your {self.user}({bound}))"


class AlertLog:
    """Recent alerts (for snapshots) and an outbox drained at a bounded rate."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.history: deque[Alert] = deque(maxlen=ALERT_HISTORY)
        self._outbox: list[Alert] = []
        self._last_sent = -math.inf
        self.total = 0
        #: The current run (stamped on alerts that carry none) and its alert count.
        self.run: int | None = None
        self.run_count = 0
        #: Told how many alerts were added (the run registry's per-run count).
        self.counter: Callable[[int], None] = lambda n: None

    def start_run(self, run: int | None) -> None:
        """A new run: its alerts are counted from 0 (``total`` goes on)."""
        with self._lock:
            self.run, self.run_count = run, 0

    def add(self, alerts: list[Alert]) -> None:
        if not alerts:
            return
        for a in alerts:
            if a.run is None:
                a.run = self.run
        self.counter(len(alerts))
        with self._lock:
            self.run_count += len(alerts)
            self.history.extend(alerts)
            self._outbox.extend(alerts)
            self.total += len(alerts)
            del self._outbox[:-ALERT_HISTORY]

    def take(self, force: bool = False) -> list[Alert]:
        """New alerts to send now, if the rate limit allows (``force``: cell end)."""
        with self._lock:
            if not self._outbox:
                return []
            now = self._clock()
            if not force and now - self._last_sent < 1.0 / MAX_ALERT_MESSAGES_PER_S:
                return []
            self._last_sent = now
            out, self._outbox = self._outbox, []
            return out

    @property
    def waiting(self) -> bool:
        return bool(self._outbox)

    def snapshot(self) -> list[dict[str, object]]:
        with self._lock:
            return [a.to_json() for a in self.history]

    def clear(self) -> int:
        with self._lock:
            n = len(self.history)
            self.history.clear()
            self._outbox.clear()
            return n
