"""Non-finite gradients caught at the step they happen: diagnosis, replay capture, skipping.

The gradient monitor calls ``at_step`` with the norms it just read, inside the optimizer
pre-hook: the gradients are final and the weights not yet touched. When the total of the
norms is non-finite:

- at the first such step of an alarm (re-armed after ``REARM_SAMPLES`` finite sampled
  steps, like the flush-time detector), the cause is diagnosed at once (diagnose.py: the
  kept batch, a forward re-run with the pre-step weights, the loss, else backward) and
  raised as one ``non_finite_cause`` alert; the replay (replay.py) captures the step.
  The flush-time ``non_finite`` alarm of those steps is dropped (``covers``): it would
  only say less, later.
- with ``skip_nonfinite`` on (the action, or ``watch(..., skip_nonfinite=True)``), the
  optimizer step is skipped (skip.py) and counted; every step is then sampled.

When the check costs nothing it always runs: on CPU the norms are host values already.
On CUDA reading the total is a host sync, so it runs only while ``skip_nonfinite`` is on
(R26: no added per-step sync otherwise); without it the flush-time alarm and the forward
probe on the next forward pass remain (monitor.py), and they say the weights may
already be updated.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..watches import watches
from . import diagnose
from .alarms import REARM_SAMPLES
from .alerts import Alert
from .bad_step import BadStep
from .skip import StepSkipper

if TYPE_CHECKING:
    import torch
    from torch.nn import Module

    from ..host import Host
    from .alerts import AlertLog
    from .inputs import InputKeeper
    from .probe import ForwardProbe
    from .replay import Replayer
    from .track import Track

SKIP_REMEDY = (
    "Skipped steps train on nothing: find the cause (the first alert of this run) and fix "
    "the data or the model; turn skip_nonfinite off to let such steps through."
)


class _State:
    """At-step alarm state of one track."""

    def __init__(self) -> None:
        self.armed = True
        self.calm = 0
        self.told_skip = False
        self.last_bad = 0
        #: (first, last) steps of alarms diagnosed here (last None: still going).
        self.episodes: deque[list[int | None]] = deque(maxlen=32)


class NonFiniteGuard:
    """The at-step check, its diagnosis and the skipping of non-finite steps."""

    def __init__(
        self,
        host: Host,
        alerts: AlertLog,
        replayer: Replayer,
        on_change: Callable[[], None],
    ) -> None:
        self.host = host
        self.alerts = alerts
        self.replayer = replayer
        self.on_change = on_change
        #: The ``skip_nonfinite`` action's setting (all tracks).
        self.skip_all = False
        #: Check at every sampled step when the norms are on the CPU (tests set False to
        #: exercise the CUDA path without skipping: flush-time alarm, probe afterwards).
        self.check_on_cpu = True
        self.keeper: InputKeeper | None = None
        self.skipper = StepSkipper()
        self._state: weakref.WeakKeyDictionary[Track, _State] = weakref.WeakKeyDictionary()
        #: id(compiled module) -> its OptimizedModule wrapper (hooked in its place).
        self._wrappers: dict[int, weakref.ref[Module]] = {}
        #: Forward probes armed and not yet reported (their hooks are removed on unload).
        self._probes: list[ForwardProbe] = []

    def attach(self) -> None:
        from .inputs import InputKeeper

        self.keeper = keeper = InputKeeper(self.host.count_error)

        def pause_keeping(paused: bool) -> None:
            keeper.paused = paused

        self.replayer.pause_keeping = pause_keeping

    def detach(self) -> None:
        probes, self._probes = self._probes, []
        for probe in probes:
            probe.remove()
        if self.keeper is not None:
            self.keeper.clear()
        self.skipper.clear()
        self._state = weakref.WeakKeyDictionary()
        self._wrappers = {}

    # --- hook-up (at plan checks) ------------------------------------------------------

    def hook_up(self, tracks: Iterable[Track], ns: dict[str, Any]) -> None:
        """Keep the last call of every track's roots and of the namespace's loss
        modules; set each track's effective ``skip_nonfinite``."""
        from .inputs import compile_wrappers, hook_target, loss_modules

        keeper = self.keeper
        if keeper is None:
            return
        wrappers = compile_wrappers(ns)
        self._wrappers = {k: weakref.ref(v) for k, v in wrappers.items()}
        roots: list[tuple[str, Module]] = []
        for track in tracks:
            plan = track.plan
            for name, ref in [] if plan is None else plan.roots:
                module = ref()
                target = None if module is None else hook_target(module, wrappers)
                if target is not None:
                    roots.append((name, target))
            self._set_skip(track)
        keeper.sync(roots, loss_modules(ns))

    def set_skip(self, on: bool, tracks: Iterable[Track]) -> None:
        self.skip_all = on
        for track in tracks:
            self._set_skip(track)
        self.on_change()  # the status carries the setting itself too

    def _set_skip(self, track: Track) -> None:
        on = self.skip_all or _watched_skip(track)
        if on != track.skip_nonfinite:
            track.skip_nonfinite = on
            self.on_change()

    # --- the step boundary (training thread) -------------------------------------------

    def at_step(
        self,
        track: Track,
        optimizer: torch.optim.Optimizer,
        norms: torch.Tensor | None,
        can_skip: bool = True,
    ) -> bool:
        """Check this step's norms (when free, or when skipping); True: step skipped.

        ``can_skip`` is False at the end-of-backward boundary of a loop without
        torch.optim: its update is the user's own code, which needs the gradients.
        """
        import torch

        self.skipper.forget(optimizer)
        skip = track.skip_nonfinite and can_skip
        if norms is None or norms.numel() == 0:
            return False
        if not skip and (norms.device.type != "cpu" or not self.check_on_cpu):
            return False  # R26: no per-step sync on CUDA unless skipping
        state = self._state.get(track)
        if state is None:
            state = self._state[track] = _State()
        if bool(torch.isfinite(norms.sum())):
            state.calm += 1
            if not state.armed and state.calm >= REARM_SAMPLES:
                state.armed, state.told_skip = True, False
                if state.episodes and state.episodes[-1][1] is None:
                    state.episodes[-1][1] = state.last_bad
            return False
        state.calm, state.last_bad = 0, track.step
        if state.armed:
            state.armed = False
            try:
                self._diagnose(track, optimizer if can_skip else None, norms, skip, state)
            except Exception:
                self.host.count_error("grads:diagnose")
        if skip:
            self.skipper.hide(optimizer)
            track.skipped_nonfinite += 1
            self.on_change()
            if not state.told_skip:
                state.told_skip = True
                self.alerts.add([self._skip_alert(track)])
        return skip

    def after_step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer's post-hook: gradients hidden from a skipped step come back."""
        self.skipper.restore(optimizer)

    def covers(self, track: Track, step: int) -> bool:
        """Whether the flush-time non-finite alarm at ``step`` was diagnosed here."""
        state = self._state.get(track)
        if state is None:
            return False
        return any(
            a is not None and step >= a and (b is None or step <= b) for a, b in state.episodes
        )

    # --- the diagnosis -----------------------------------------------------------------

    def _diagnose(
        self,
        track: Track,
        optimizer: torch.optim.Optimizer | None,
        norms: torch.Tensor,
        skip: bool,
        state: _State,
    ) -> None:
        keeper, plan = self.keeper, track.plan
        if keeper is None or plan is None:
            return
        wrappers = {k: m for k, r in self._wrappers.items() if (m := r()) is not None}
        roots: list[tuple[str, Module, Any]] = []
        for name, ref in plan.roots:
            module = ref()
            if module is not None:
                roots.append((name, module, keeper.call_of(module, wrappers)))
        if not any(call is not None for _, _, call in roots):
            return  # no batch kept yet (the first step): the flush-time alarm speaks
        state.episodes.append([track.step, None])
        losses = keeper.losses()
        keeper.paused = True
        try:
            finding = diagnose.overflow(plan.params, norms, _grad_layer(track, norms))
            finding = finding or diagnose.diagnose(
                roots,
                losses,
                diagnose.logged_loss(self.host.stream),
                _grad_layer(track, norms),
                track.name,
                track.step,
            )
        finally:
            keeper.paused = False
        total = float(norms.sum())
        alert = diagnose.alert(
            finding, track.name, track.step, skip, total, track.boundary == "end_of_backward"
        )
        if skip:
            state.told_skip = True
        self.alerts.add([alert])
        self.on_change()
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
        )
        self.replayer.capture(bad)

    # --- the fallback: a forward probe on the next forward pass (probe.py) -------------

    def arm_probe(self, track: Track) -> None:
        """After a flush-time non-finite alarm the step could not be checked at."""
        from .probe import ForwardProbe, probe_roots

        plan = track.plan
        roots = probe_roots(plan.roots) if plan is not None else []
        if roots and track.probe is None:
            track.probe = ForwardProbe(track.name, track.step, roots)
            self._probes.append(track.probe)

    def finish_probe(self, track: Track, cell_end: bool = False) -> None:
        """Report once one forward pass has run (at the next step, or the cell's end)."""
        probe = track.probe
        if probe is None or (cell_end and not probe.ran):
            return
        try:
            track.probe = None
            if probe in self._probes:
                self._probes.remove(probe)
            alert = probe.report(track.step if probe.ran else probe.armed_at)
            if alert is not None:
                self.alerts.add([alert])
                self.on_change()
        except Exception:
            probe.remove()
            self.host.count_error("grads:probe")

    def _skip_alert(self, track: Track) -> Alert:
        msg = (
            f"Skipping non-finite steps: step {track.step} of {track.name} had a NaN/Inf "
            "gradient and was skipped (weights and optimizer state unchanged); further "
            "ones are skipped and counted in the gradients panel."
        )
        return Alert(
            "non_finite_skipped", "warning", track.step, None, msg, SKIP_REMEDY, track.name
        )


def _grad_layer(track: Track, norms: torch.Tensor) -> str | None:
    """The layer nearest the loss whose gradient norm is non-finite (one host copy)."""
    import torch

    plan = track.plan
    if plan is None:
        return None
    bad = (~torch.isfinite(norms)).tolist()
    layers = {plan.layer_of[i] for i, b in enumerate(bad) if b and i < len(plan.layer_of)}
    return plan.layers[max(layers)].name if layers else None


def _watched_skip(track: Track) -> bool:
    """A ``watch(model, opt, skip_nonfinite=True)`` covers this track's parameters."""
    plan, opt = track.plan, track.opt_ref()
    active = [w for w in watches()[1] if w.skip_nonfinite]
    if not active or plan is None or opt is None:
        return False
    ids = {id(p) for p in plan.params}
    for w in active:
        model = w.model
        if model is None or (w.optimizer is not None and w.optimizer is not opt):
            continue
        try:
            if any(id(p) in ids for p in model.parameters()):
                return True
        except Exception:
            continue
    return False
