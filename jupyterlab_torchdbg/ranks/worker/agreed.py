"""All-rank actions on a worker: applied at one agreed optimizer step, or not at all.

DDP replicas stay identical only if every rank changes its update at the same step. The
kernel picks a step ahead of all ranks and runs two phases (contract in
PROTOCOL.md "Ranks", "All-rank actions"):

1. ``prepare {action_id, action, args, at_step}``: this rank promises to apply it before
   its optimizer step number ``at_step`` if its counter is still below it (``ack``
   ok=true), else refuses ("already at step N"). Check and record happen under one lock
   with the training thread's counter, so a promise is never broken by a step racing it.
2. ``commit`` / ``cancel``: the decision. A rank that reaches ``at_step`` before the
   decision holds its step there up to ``DECIDE_S`` for it; without a commit by then
   it drops the action. So either every rank applies at ``at_step`` or none does.

Actions: ``clip {max_norm}`` (exactly ``clip_grad_norm_`` over the optimizer's
parameters at every step from then on, by the kernel's clip, kernel/control/clip.py:
the total comes from the norms the reader read at this step, one read serving both, as
in the kernel; after the all-reduce, every replica clips identically),
``unclip``, ``scale_lr {factor}`` (every group's lr once), ``pause`` (hold in the
pre-hook until ``resume``; only the user's KeyboardInterrupt ends it early).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import torch

    from ...kernel.control.clip import Clipper
    from ...kernel.grads.naming import Stepped
    from ..wire.messages import Ack
    from .reader import Read

ACTIONS = ("clip", "unclip", "pause", "scale_lr")
#: How long a rank at the agreed step waits for commit or cancel.
DECIDE_S = 5.0
#: The pause loop's wake-up interval (KeyboardInterrupt gets through between waits).
HOLD_SLICE_S = 0.1

Send = Callable[[str, Mapping[str, object]], None]


@dataclass
class Prepared:
    action_id: str
    action: str
    args: dict[str, object]
    at_step: int
    decided: threading.Event = field(default_factory=threading.Event)
    verdict: str | None = None  # "commit" | "cancel"


class Agreements:
    """The step counter and the actions agreed on it (sender and training threads)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._lock = threading.Lock()
        #: Optimizer steps begun by this worker (its primary optimizer's pre-hooks).
        self.step = 0
        self._pending: dict[str, Prepared] = {}
        #: Due at the current step, waiting for their decision (the training thread).
        self._settling: dict[str, Prepared] = {}
        #: Clipping on from an agreed step on (max_norm), or None.
        self.clip: float | None = None
        self.paused = False
        #: Set while the training thread waits for a decision (its phase: held).
        self.holding = False
        self._resume = threading.Event()
        #: Actions that failed to apply.
        self.failures = 0
        self._optimizers: weakref.WeakSet[Stepped] = weakref.WeakSet()
        #: The rank's steps are the ends of backward passes of a loop without an
        #: optimizer (ranks/worker/manual.py): no learning rate to scale.
        self.manual = False
        #: This step's read (optimizer, step, reader.Read), set by the boundary for the
        #: clip to reuse and dropped when the step's boundary ends.
        self.read: tuple[Stepped, int, Read] | None = None
        self._clipper: Clipper | None = None
        #: Steps whose clip was refused (a non-finite total: nothing to clip), and why.
        self.clip_refusals: list[str] = []

    # --- the sender thread (messages from the kernel) ----------------------------------

    def prepare(self, content: Mapping[str, object]) -> Ack:
        """The ``ack`` for a ``prepare``."""
        action_id = str(content.get("action_id", ""))
        action = content.get("action")
        args = content.get("args") or {}
        at_step = content.get("at_step")
        with self._lock:
            reply: Ack = {"action_id": action_id, "ok": False, "reason": None, "step": self.step}
            if action not in ACTIONS or not isinstance(args, dict):
                reply["reason"] = f"unknown action {action!r}"
            elif not isinstance(at_step, int) or isinstance(at_step, bool):
                reply["reason"] = "at_step is not an integer"
            elif self.step >= at_step:
                reply["reason"] = f"already at step {self.step}"
            elif action == "scale_lr" and self.manual:
                reply["reason"] = (
                    "no optimizer: the loop updates its weights by hand (no learning rate to scale)"
                )
            else:
                self._pending[action_id] = Prepared(action_id, str(action), args, at_step)
                reply["ok"] = True
        return reply

    def decide(self, action_id: str, verdict: str) -> None:
        """``commit`` or ``cancel`` for a prepared action (unknown ids: ignored)."""
        with self._lock:
            prepared = self._pending.get(action_id) or self._settling.get(action_id)
            if prepared is None:
                return
            prepared.verdict = verdict
            if verdict == "cancel":
                self._pending.pop(action_id, None)
        prepared.decided.set()

    def resume(self) -> None:
        self.paused = False
        self._resume.set()

    # --- the training thread (torch's step pre-hook) -----------------------------------

    def begin_step(self, optimizer: Stepped, primary: bool) -> tuple[int, list[Prepared]]:
        """Count a primary step; the prepared actions due at it (removed from pending)."""
        try:
            self._optimizers.add(optimizer)
        except TypeError:
            pass
        with self._lock:
            if primary:
                self.step += 1
            due = [p for p in self._pending.values() if p.at_step <= self.step]
            for p in due:
                del self._pending[p.action_id]
                self._settling[p.action_id] = p
        return self.step, due

    def settle(self, due: list[Prepared], optimizer: Stepped) -> None:
        """Wait (bounded) for each due action's decision; apply the committed ones."""
        if not due:
            return
        deadline = time.monotonic() + DECIDE_S
        self.holding = True
        try:
            for p in due:
                p.decided.wait(max(0.0, deadline - time.monotonic()))
        finally:
            self.holding = False
            with self._lock:
                for p in due:
                    self._settling.pop(p.action_id, None)
        for p in sorted(due, key=lambda p: p.action != "pause"):  # pause last
            if p.verdict != "commit":
                continue
            try:
                self._apply(p, optimizer)
            except Exception:
                self.failures += 1  # not applied: no ``applied`` (the kernel sees it missing)
                continue
            self._send("applied", {"action_id": p.action_id, "step": self.step})

    def _apply(self, p: Prepared, optimizer: Stepped) -> None:
        if p.action == "clip":
            self.clip = _number(p.args.get("max_norm", 1.0))
        elif p.action == "unclip":
            self.clip = None
        elif p.action == "scale_lr":
            factor = _number(p.args.get("factor", 1.0))
            for opt in {id(o): o for o in [optimizer, *list(self._optimizers)]}.values():
                for group in opt.param_groups:
                    if "lr" in group:
                        group["lr"] = group["lr"] * factor
        elif p.action == "pause":
            self._resume.clear()
            self.paused = True

    def clip_now(self, optimizer: Stepped, step: int) -> None:
        """Clip this optimizer's gradients if clipping is on: the kernel's clip, with the
        total from this step's read when there is one (bit for bit ``clip_grad_norm_``)."""
        max_norm = self.clip
        if max_norm is None:
            return
        from ...kernel.control.clip import Clipper
        from ...kernel.gradscaler import kernel_found_inf, kernel_scale
        from ...kernel.step_read import StepRead

        if self._clipper is None:
            self._clipper = Clipper(self._refused)
        read = (
            self.read[2]
            if self.read and self.read[0] is optimizer and self.read[1] == step
            else None
        )
        step_read = None
        # reused unless the norms are not the gradients' as clip_grad_norm_ sees them: a
        # fused optimizer's still scaled ones, or a rank's shards of DTensor gradients
        if read is not None and read.norms is not None and read.replicas is None:
            if kernel_scale(optimizer) is None:
                step_read = StepRead(
                    step, read.params, read.norms, found_inf=kernel_found_inf(optimizer)
                )
        # a ModelSource has an optimizer's param_groups, all the clipper reads (as the
        # kernel's controller passes it)
        self._clipper.clip(cast("torch.optim.Optimizer", optimizer), max_norm, step, step_read)

    def _refused(self, why: str) -> None:
        self.clip_refusals.append(why)
        del self.clip_refusals[:-16]

    @property
    def clips_reused(self) -> int:
        """Clipped steps whose total came from the reader's read (not a second read)."""
        return 0 if self._clipper is None else int(self._clipper.reused)

    def hold(self) -> None:
        """While paused: wait here (the training thread) until ``resume``."""
        while self.paused:
            self._resume.wait(HOLD_SLICE_S)


def _number(value: object) -> float:
    """An action's numeric argument as ``float()`` takes it (else TypeError: not applied)."""
    if isinstance(value, (int, float, str)):
        return float(value)
    raise TypeError(f"not a number: {type(value).__name__}")
