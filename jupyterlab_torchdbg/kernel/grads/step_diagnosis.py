"""The at-step diagnosis of one non-finite step, its alert, and its capture for the replay.

Called by the guard (nonfinite.py) at the first non-finite step of an alarm, inside the
optimizer pre-hook (the weights not yet touched): the roots' kept calls (inputs.py), the
cause (diagnose.py: an overflow of finite values, the batch, the forward re-run, the loss
``backward()`` was called on, else backward), one ``non_finite_cause`` alert, and the
``BadStep`` the replay runs on click (replay.py). A step whose batch was not kept gets an
alert saying what was checked (the weights) and what was not: a model first seen at that
very step has its next non-finite step diagnosed in full; a model whose forward bypasses
the hooks (``model.forward(x)``) is said to; one that cannot be hooked at all (a
ScriptModule) is left to the flush-time alarm, as before.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import cause_alert, diagnose, rerun
from .alerts import Alert
from .bad_step import BadStep
from .loop_clip import NORM, clipping_of
from .loss_check import logged_loss

if TYPE_CHECKING:
    import torch
    from torch.nn import Module

    from ..host import Host
    from .alerts import AlertLog
    from .bad_step import KeptCall
    from .finding import Finding
    from .inputs import InputKeeper
    from .replay import Replayer
    from .skip_facts import SkipFacts
    from .track import Track


class AlarmState:
    """At-step alarm state of one track."""

    def __init__(self) -> None:
        self.armed = True
        self.calm = 0
        self.told_skip = False
        self.last_bad = 0
        #: A bad step could not be diagnosed (no batch kept): the next one is, once.
        self.retried = False
        #: (first, last) steps of alarms diagnosed here (last None: still going).
        self.episodes: deque[list[int | None]] = deque(maxlen=32)


class StepDiagnosis:
    """Diagnoses a bad step, raises its alert and hands it to the replayer."""

    def __init__(
        self,
        host: Host,
        alerts: AlertLog,
        replayer: Replayer,
        on_change: Callable[[], None],
        clipping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.host = host
        #: Whether the clip action is on (a remedy does not advise it then).
        self.clipping = clipping
        self.alerts = alerts
        self.replayer = replayer
        self.on_change = on_change

    def run(
        self,
        keeper: InputKeeper,
        wrappers: dict[int, Module],
        track: Track,
        optimizer: torch.optim.Optimizer | None,
        norms: torch.Tensor,
        skip: bool,
        state: AlarmState,
        kept: SkipFacts | None,
        fresh: str | None,
    ) -> None:
        """Diagnose this bad step, raise its alert, capture it for the replay."""
        plan = track.plan
        if plan is None:
            state.armed = False
            return
        roots: list[tuple[str, Module, KeptCall | None]] = []
        for name, ref in plan.roots:
            module = ref()
            if module is not None:
                roots.append((name, module, keeper.call_of(module, wrappers)))
        unkept = not any(call is not None for _, _, call in roots)
        why = {keeper.seen_first(m, wrappers) for _, m, _ in roots} if unkept else set()
        if unkept and why <= {"unhooked"}:
            # Never hookable (a ScriptModule, a model compiled in place): the flush-time
            # alarm speaks, as for a step that could not be checked.
            state.armed = False
            return
        if not state.episodes or state.episodes[-1][1] is not None:
            state.episodes.append([track.step, None])  # its flush-time alarm is covered
        grad_layer = _grad_layer(track, norms)
        if unkept:
            # The model was first seen at this very step (created in this cell, no
            # watch() before its loop), or its forward bypassed the hooks: no batch.
            # Say what was checked; a first-seen model's next non-finite step is
            # diagnosed in full (its batch is kept from now on).
            first = "now" in why
            finding = diagnose.overflow(plan.params, norms, grad_layer) or diagnose.unkept(
                [m for _, m, _ in roots], grad_layer, first
            )
            state.armed = first and finding.cause == "unchecked" and not state.retried
            state.retried = True
            self._alert(track, finding, skip, norms, fresh, kept, state)
            if finding.cause == "unchecked":
                self.replayer.not_kept(track.name, track.step, first)
            return
        state.armed = False
        losses = keeper.losses()
        root = keeper.root
        keeper.paused = True
        try:
            finding = diagnose.overflow(plan.params, norms, grad_layer) or diagnose.diagnose(
                roots,
                losses,
                logged_loss(self.host.stream),
                grad_layer,
                track.name,
                track.step,
                root=root,
                ns=_user_ns(self.host),
                rerun_ok=rerun.allowed(),
            )
        finally:
            keeper.paused = False
        alert = self._alert(track, finding, skip, norms, fresh, kept, state)
        after = max((c.call for _, _, c in roots if c is not None), default=0)
        bad = BadStep(
            track=track.name,
            step=track.step,
            optimizer=None if optimizer is None else weakref.ref(optimizer),
            roots=[(name, weakref.ref(m)) for name, m, _ in roots],
            calls={name: call for name, _, call in roots if call is not None},
            losses=losses,
            cause=finding.cause,
            skipped=skip,
            message=alert.message,
            root=root if root is not None and root.call > after else None,
        )
        self.replayer.capture(bad)

    def _alert(
        self,
        track: Track,
        finding: Finding,
        skip: bool,
        norms: torch.Tensor,
        fresh: str | None,
        kept: SkipFacts | None,
        state: AlarmState,
    ) -> Alert:
        total = float(norms.sum())
        alert = cause_alert.alert(
            finding,
            track.name,
            track.step,
            skip,
            total,
            track.boundary == "end_of_backward",
            fresh=fresh,
            # the panel's clip action, or the loop's own clip_grad_norm_ (loop_clip.py)
            clipping=self.clipping() or clipping_of(track, False).user == NORM,
            skipped_facts=None if kept is None else kept.text(),
        )
        if skip:
            state.told_skip = True
        self.alerts.add([alert])
        self.on_change()
        return alert


def _user_ns(host: object) -> dict[str, object]:
    ns = getattr(getattr(host, "shell", None), "user_ns", None)
    return ns if isinstance(ns, dict) else {}


def _grad_layer(track: Track, norms: torch.Tensor) -> str | None:
    """The layer nearest the loss whose gradient norm is non-finite (one host copy)."""
    import torch

    plan = track.plan
    if plan is None:
        return None
    bad = (~torch.isfinite(norms)).tolist()
    layers = {plan.layer_of[i] for i, b in enumerate(bad) if b and i < len(plan.layer_of)}
    return plan.layers[max(layers)].name if layers else None
