"""Non-finite gradients caught at the step they happen: diagnosis, replay capture, skipping.

The gradient monitor calls ``at_step`` with the norms it just read, inside the optimizer
pre-hook: the gradients are final and the weights not yet touched. When the total of the
norms is non-finite:

- at the first such step of an alarm (re-armed after ``REARM_SAMPLES`` finite sampled
  steps, like the flush-time detector), the cause is diagnosed at once (diagnose.py: the
  kept batch, a forward re-run with the pre-step weights, the loss ``backward()`` was
  called on, else backward) and raised as one ``non_finite_cause`` alert; the replay
  (replay.py) captures the step. The flush-time ``non_finite`` alarm of those steps is
  dropped (``covers``): it would only say less, later. A step whose batch was not kept
  (the model was first seen at that very step) gets an alert saying what was and was not
  checked, and the next non-finite step is diagnosed in full.
- with ``skip_nonfinite`` on (the action, or ``watch(..., skip_nonfinite=True)``), the
  optimizer step is skipped (skip.py) and counted; every step is then sampled. The
  normalisation running statistics the batch updated are put back first (norm_stats.py),
  so the model is as if the batch never ran (R48); the alert names what was restored and
  what was not.

Only NaN/Inf values are skipped: a norm that is non-finite because finite values overflow
float32's sum of squares is an explosion, applied and said so. A step GradScaler skips in a
fused optimizer's kernel (``found_inf``, gradscaler.py) is never alarmed here. A step taken
with a closure is checked when the closure has returned (closure_skip.py).

Remedies fit what happened before: at a step before which this optimizer applied no
update the tool saw (the first, or every one so far skipped), the learning rate has not
acted on these gradients, and no remedy says to lower it.

The roots are hooked before the first step too (``scan_models``: at a cell's start and at
``watch()``, the namespace's models with trainable parameters), so a training cell's first
step has its batch kept.

When the check costs nothing it always runs: on CPU the norms are host values already.
On CUDA reading the total is a host sync, so it runs only while ``skip_nonfinite`` is on
(R26: no added per-step sync otherwise); without it the flush-time alarm and the forward
probe on the next forward pass remain (monitor.py), and they say the weights may
already be updated.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from ..gradscaler import kernel_found_inf
from ..watches import watches
from . import hookup, skip_facts
from .alarms import REARM_SAMPLES
from .closure_skip import ClosureSkips
from .skip import StepSkipper
from .skip_facts import SkipFacts
from .step_diagnosis import AlarmState, StepDiagnosis

if TYPE_CHECKING:
    import torch
    from torch.nn import Module

    from ..host import Host
    from .alerts import AlertLog
    from .inputs import InputKeeper
    from .probe import ForwardProbe
    from .replay import Replayer
    from .skip_facts import Shadows
    from .track import Track


class _HasTracks(Protocol):
    @property
    def tracks(self) -> Mapping[torch.optim.Optimizer, Track]: ...

    def clipping(self) -> bool: ...


class NonFiniteGuard:
    """The at-step check, its diagnosis and the skipping of non-finite steps."""

    def __init__(
        self,
        host: Host,
        alerts: AlertLog,
        replayer: Replayer,
        on_change: Callable[[], None],
        owner: _HasTracks | None = None,
    ) -> None:
        self.host = host
        #: The monitor, whose tracks a cell start's scan reads.
        self._owner = owner
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
        self.closures = ClosureSkips()
        self._diagnosis = StepDiagnosis(host, alerts, replayer, on_change, self._clipping)
        self._state: weakref.WeakKeyDictionary[Track, AlarmState] = weakref.WeakKeyDictionary()
        #: id(compiled module) -> its OptimizedModule wrapper (hooked in its place).
        self._wrappers: dict[int, weakref.ref[Module]] = {}
        #: Forward probes armed and not yet reported (their hooks are removed on unload).
        self._probes: list[ForwardProbe] = []
        #: Models hooked before their first step (a cell's start, ``watch()``), weakly.
        self._candidates: list[tuple[str, weakref.ref[Module]]] = []
        #: Optimizer (or ModelSource) -> its steps the tool saw applied (not skipped).
        self._applied: weakref.WeakKeyDictionary[torch.optim.Optimizer, int] = (
            weakref.WeakKeyDictionary()
        )

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
        self.closures.clear()
        self._state = weakref.WeakKeyDictionary()
        self._wrappers = {}
        self._candidates = []
        self._applied = weakref.WeakKeyDictionary()

    # --- hook-up (at plan checks) ------------------------------------------------------

    def hook_up(self, tracks: Iterable[Track], ns: Mapping[str, object]) -> None:
        """Keep the last call of every track's roots (and of the candidates) and of the
        namespace's loss modules; set each track's effective ``skip_nonfinite``."""
        tracks = list(tracks)
        for track in tracks:
            self._set_skip(track)
        if self.keeper is not None:
            self.keeper.in_step = True
        try:
            self._sync(tracks, ns)
        finally:
            if self.keeper is not None:
                self.keeper.in_step = False

    def scan_models(self, ns: Mapping[str, object]) -> None:
        """A cell's start or ``watch()`` (the kernel's thread, no other cell running):
        hook the namespace's models with trainable parameters (and the watched ones)
        before their first step, so that step's batch and loss are kept too."""
        if self.keeper is None or hookup.forward_running():
            return  # a thread inside a module's forward iterates its hook dicts: next time
        try:
            self._candidates = [(n, weakref.ref(m)) for n, m in hookup.candidate_models(ns)]
            tracks = self._owner.tracks if self._owner is not None else {}
            self._sync(list(tracks.values()), ns)
        except Exception:
            self.host.count_error("grads:scan")

    def _sync(self, tracks: list[Track], ns: Mapping[str, object]) -> None:
        if self.keeper is not None:
            self.keeper.roots_on_cuda = (
                self.skip_all
                or any(t.skip_nonfinite for t in tracks)
                or any(w.skip_nonfinite for w in watches()[1])
            )
            wrappers = hookup.sync(self.keeper, tracks, self._candidates, ns, self.skip_all)
            self._wrappers = {k: weakref.ref(v) for k, v in wrappers.items()}

    def set_skip(self, on: bool, tracks: Iterable[Track]) -> None:
        self.skip_all = on
        if self.keeper is not None and on:
            self.keeper.roots_on_cuda = True
        for track in tracks:
            self._set_skip(track)
        self.on_change()  # the status carries the setting itself too

    def _set_skip(self, track: Track) -> None:
        on = self.skip_all or skip_facts.watched_skip(track)
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
        self.skipper.forget(optimizer)
        skipped: bool | None = False
        try:
            skipped = self._check(track, optimizer, norms, can_skip)
        finally:
            if self.keeper is not None:
                self.keeper.epoch += 1
            if track.skip_nonfinite:
                self._rearm_norms(track)  # the next forward copies the statistics again
            if skipped is False:
                try:
                    self._applied[optimizer] = self._applied.get(optimizer, 0) + 1
                except TypeError:
                    pass  # not weakly referenceable: every step counts as the first
        return bool(skipped)

    def _check(
        self,
        track: Track,
        optimizer: torch.optim.Optimizer,
        norms: torch.Tensor | None,
        can_skip: bool,
    ) -> bool | None:
        """True: skipped; None: GradScaler skips it (a fused kernel's ``found_inf``)."""
        import torch

        from .collector import values_nonfinite

        skip = track.skip_nonfinite and can_skip
        if norms is None or norms.numel() == 0:
            return False
        if not skip and (norms.device.type != "cpu" or not self.check_on_cpu):
            return False  # R26: no per-step sync on CUDA unless skipping
        state = self._state.get(track)
        if state is None:
            state = self._state[track] = AlarmState()
        if bool(torch.isfinite(norms).all()):
            state.calm += 1
            if not state.armed and state.calm >= REARM_SAMPLES:
                state.armed, state.told_skip, state.retried = True, False, False
                if state.episodes and state.episodes[-1][1] is None:
                    state.episodes[-1][1] = state.last_bad
            return False
        found_inf = kernel_found_inf(optimizer)
        if found_inf is not None and bool(found_inf != 0):
            return None  # GradScaler's own skip (R31): never alarmed, nothing to hide
        # Only NaN/Inf values are skipped: finite values whose float32 norm overflows are
        # an explosion, applied (the overflow diagnosis says so).
        plan = track.plan
        skip = skip and (plan is None or values_nonfinite(plan.params, norms))
        state.calm, state.last_bad = 0, track.step
        # Before the diagnosis: its forward re-run and the replay's copy then see the
        # statistics of before this batch, as the skipped step leaves them.
        kept = self._restore_norms(track) if skip else None
        if state.armed:
            try:
                fresh = skip_facts.updates_before(optimizer, self._applied.get(optimizer, 0))
                wrappers = {k: m for k, r in self._wrappers.items() if (m := r()) is not None}
                if self.keeper is not None:
                    self._diagnosis.run(
                        self.keeper,
                        wrappers,
                        track,
                        optimizer if can_skip else None,
                        norms,
                        skip,
                        state,
                        kept,
                        fresh,
                    )
            except Exception:
                state.armed = False
                self.host.count_error("grads:diagnose")
        if skip:
            self.skipper.hide(optimizer)
            track.skipped_nonfinite += 1
            self.on_change()
            if not state.told_skip:
                state.told_skip = True
                self.alerts.add([skip_facts.skip_alert(track, kept)])
        return skip

    def after_step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer's post-hook: a skipped step with a closure is put back from its
        copy (weights, state); gradients hidden from a skipped step come back."""
        try:
            self.closures.end(optimizer, self.skipper.hidden(optimizer))
        finally:
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

    # --- normalisation statistics under skip (norm_stats.py) --------------------------

    def _shadows(self, track: Track) -> Shadows:
        """(root name, root, its NormShadow or None) of the track's roots."""
        keeper, plan = self.keeper, track.plan
        if keeper is None or plan is None:
            return []
        wrappers = {k: m for k, r in self._wrappers.items() if (m := r()) is not None}
        out = []
        for name, ref in plan.roots:
            module = ref()
            if module is not None:
                out.append((name, module, keeper.norms_of(module, wrappers)))
        return out

    def _rearm_norms(self, track: Track) -> None:
        if self.keeper is not None:
            try:
                skip_facts.rearm(self.keeper, self._shadows(track), self._wrapper_of)
            except Exception:
                self.host.count_error("grads:norms")

    def _clipping(self) -> bool:
        try:
            return self._owner is not None and bool(self._owner.clipping())
        except Exception:
            return False

    def _wrapper_of(self, module: Module) -> Module | None:
        ref = self._wrappers.get(id(module))
        return None if ref is None else ref()

    def _restore_norms(self, track: Track) -> SkipFacts | None:
        """Put back the running statistics the skipped batch updated; what was done."""
        try:
            opt = track.opt_ref()
            return skip_facts.restore(opt, self._shadows(track), self.closures.holds(opt))
        except Exception:
            self.host.count_error("grads:norms")
            return None

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

    # --- a step with a closure (closure_step.py, closure_skip.py) ----------------------

    def before_closure(self, optimizer: torch.optim.Optimizer) -> None:
        """A step with a closure begins: with skipping on, a copy to put it back from."""
        track = self._owner.tracks.get(optimizer) if self._owner is not None else None
        on = self.skip_all or (track is not None and track.skip_nonfinite)
        self.closures.begin(optimizer, on)

    def closure_again(self, optimizer: torch.optim.Optimizer) -> None:
        """A later evaluation of the step's closure returned: a first non-finite one skips
        the step (put back from the copy at the post-hook); the gradients are hidden."""
        first = self.closures.later(optimizer)
        if not (first or self.closures.bad(optimizer)):
            return
        self.skipper.forget(optimizer)
        self.skipper.hide(optimizer)
        track = self._owner.tracks.get(optimizer) if self._owner is not None else None
        if first and track is not None:
            track.skipped_nonfinite += 1
            self.on_change()
            state = self._state.setdefault(track, AlarmState())
            kept = self._restore_norms(track)
            if not state.told_skip:
                state.told_skip = True
                self.alerts.add([skip_facts.skip_alert(track, kept, later=True)])
