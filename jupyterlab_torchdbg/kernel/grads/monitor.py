"""The gradient monitor: samples gradient norms at every optimizer step boundary.

Zero code change: the step boundary (``step_boundary.py``, torch's global optimizer step
pre-hook) calls ``on_step`` before every ``optimizer.step()``. Gradients are final there:
after DDP's all-reduce (R34), after GradScaler's ``unscale_`` or divided by the scale a
fused kernel unscales by (R31, gradscaler.py), after the closure of ``step(closure)``
(closure_step.py). Per optimizer a ``Track`` (track.py) keeps the step count, stride,
plan, stream block and alarm state. What was read is returned as a ``StepRead`` for
training control in the same step. Cost per step when not sampling: a dict lookup, a
counter and a clock read; sampled: one foreach norm pass, one stack, one row queued; the
rest at flush. R11: nothing here raises into ``step()``; failures are counted.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ...protocol import jsonable
from ..gradscaler import kernel_found_inf, kernel_scale, scale_of_step
from ..step_read import StepRead
from ..watches import watch_version
from . import check, loop_clip, naming, per_run
from .alarms import Thresholds
from .alerts import AlertLog
from .divergence import LossWatch
from .nonfinite import NonFiniteGuard
from .replay import Replayer
from .retired import RetiredTracks
from .status import grads_message
from .stride import Periodic, Sampler
from .track import NO_GRADS_REASON, Track, Tracks

if TYPE_CHECKING:
    import torch

    from ...protocol.messages import SetThresholdsArgs
    from ..backward_boundary import ModelSource
    from ..host import Host
    from . import collector

#: How often a plan is re-validated in full (watches, requires_grad, GradScaler).
FULL_CHECK_S = 5.0
#: ``grads`` status messages at most this often while training (plus on changes).
STATUS_INTERVAL_S = 2.0
#: Status changes (new layers, stride, skips) are sent at most this often.
STATUS_MIN_INTERVAL_S = 0.5
#: Flushed rows are checked for alarms in batches (a fixed cost per check) at most this often.
EVALUATE_INTERVAL_S = 1.0
#: ... or sooner once this many rows wait.
EVALUATE_MAX_ROWS = 4096


class GradMonitor:
    """Owns the step hook, the tracks, the alert log and the grads actions' state."""

    def __init__(
        self,
        ext: Host,
        clipping: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.ext = ext
        #: Whether clipping is on (it reads every step's norms: this read is the one).
        self.clipping = clipping
        self.clock = clock
        self.thresholds = Thresholds()
        self.alerts = AlertLog()
        self.loss_watch = LossWatch()  # the logged loss's jumps (the run's, not a track's)
        self.mode: tuple[str, int] = ("auto", 1)
        self.tracks: Tracks = weakref.WeakKeyDictionary()
        self.retired = RetiredTracks()  # optimizer gone, rows not judged yet (retired.py)
        #: The run the tracks belong to (per_run.py: a new run, new tracks).
        self.run: int | None = None
        self.step_base: dict[str, int] = {}
        self._collector: Any = None  # Any: the collector module once torch is in (attach_torch)
        self._status_dirty, self._last_status = True, -math.inf
        self._steps_at_status = 0
        self._rows_waiting = False
        self._last_eval, self.torch_attached = -math.inf, False
        #: Periodic work (flush, alarms, status): timed and paid from its own budget.
        self.periodic = Periodic()
        #: The newest non-finite step's capture and the ``replay_step`` action (replay.py).
        self.replayer = Replayer(ext, self.alerts, self._dirty)
        #: Non-finite steps: diagnosed at the step, skipped on request (nonfinite.py).
        self.guard = NonFiniteGuard(ext, self.alerts, self.replayer, self._dirty, self)
        per_run.connect(self, ext)

    # --- lifecycle -------------------------------------------------------------------

    def attach_torch(self) -> None:
        """torch is imported: the step boundary will call ``on_step`` from now on."""
        from . import collector

        self._collector = collector
        self.guard.attach()
        self.torch_attached = True
        self._status_dirty = True

    def _dirty(self) -> None:
        self._status_dirty = True

    status_changed = _dirty

    def detach_torch(self) -> None:
        self.replayer.close()
        self.guard.detach()
        self.tracks = weakref.WeakKeyDictionary()
        self.retired.clear()
        self.torch_attached = False

    # --- the step boundary (training thread) -----------------------------------------

    def on_backward(self, source: ModelSource) -> StepRead | None:
        """At the end of a backward pass of a model no optimizer steps (its track is
        keyed by ``source``; backward_boundary.py): the same read, alarms and flush as
        ``on_step``, or, for a loop that clips by norm, the step counted and its read
        deferred to the clip (loop_clip.defer). A queued replay waits for an optimizer
        step or the cell's end: its backward must not nest inside the user's."""
        key = cast("torch.optim.Optimizer", source)  # duck-typed as one: see track.Tracks
        try:
            deferred = loop_clip.defer(self, source, key)
        except Exception:
            self.ext.count_error("grads:hook")
            return None
        return deferred if deferred is not None else self.on_step(key, replay=False)

    def on_step(
        self, optimizer: torch.optim.Optimizer, replay: bool = True, pending: bool = True
    ) -> StepRead | None:
        """Before ``optimizer.step()``: sample this step's norms if due (always while
        clipping), then the periodic flush and alarm checks. Returns what was read.
        ``pending``: a queued replay runs first (not inside a step's closure, R34)."""
        if replay and pending:
            self.replayer.run_pending()  # a queued replay (R34: between steps), unbilled
        try:
            now = self.clock()
            track = self._begin(optimizer, now)
            # While the clip action is on, clipping reads every step's norms anyway:
            # this read is the one it reuses (one read of the grads serves both).
            # Skipping non-finite steps needs every step's norms too.
            sample = track.sampler.tick(now) or self.clipping() or track.skip_nonfinite
            return self._read(track, optimizer, now, sample, replay)
        except Exception:
            self.ext.count_error("grads:hook")
            return None

    def _begin(self, optimizer: torch.optim.Optimizer, now: float) -> Track:
        """A step boundary of ``optimizer``: its run, its track, the step counted."""
        run = per_run.current_run(self.ext)
        if run != self.run:
            per_run.start_run(self, run)
        track = self.tracks.get(optimizer) or self._new_track(optimizer)
        track.step += 1
        track.note_clip(self.clipping())
        if track.probe is not None:
            self.guard.finish_probe(track)
        return track

    def _read(
        self, track: Track, optimizer: torch.optim.Optimizer, now: float, sample: bool, replay: bool
    ) -> StepRead:
        """The step's read (if ``sample``), the non-finite guard, the periodic flush."""
        norms = self._sample(track, optimizer, now) if sample else None
        # Non-finite: diagnosed now, before the weights change; maybe skipped.
        skipped = self.guard.at_step(track, optimizer, norms, can_skip=replay)
        stream = self.ext.stream
        due = stream.due()
        if due or (self._rows_waiting and now - self._last_eval >= EVALUATE_INTERVAL_S):
            t0 = self.clock()
            if due:
                stream.flush()
            self._after_flush(flushed=due)
            # Not the read's cost (the stride ignores it): over its own budget, the
            # stream flushes less often instead (stride.Periodic).
            stream.slowdown = self.periodic.add(self.clock() - t0, t0)
        plan = track.plan
        return StepRead(
            step=track.step,
            params=plan.params if norms is not None and plan is not None else None,
            norms=norms,
            scaler=plan.scaler() if plan is not None and plan.scaler is not None else None,
            skipped=skipped,
            found_inf=kernel_found_inf(optimizer),
        )

    def user_clip(self, tensors: loop_clip.Tensors, kind: str, bound: float, grads: bool) -> None:
        """The loop's own clip (user_clip.py) just ran on some parameters: loop_clip.py."""
        try:
            loop_clip.after_clip(self, tensors, kind, bound, grads)
        except Exception:
            self.ext.count_error("grads:user_clip")

    def hand_over(self, source: ModelSource) -> None:  # an optimizer took ``source`` over
        try:
            per_run.hand_over(self, source)
        except Exception:
            self.ext.count_error("grads:hand_over")

    def after_step(self, optimizer: torch.optim.Optimizer) -> None:
        """After ``optimizer.step()``: a skipped step's gradients are put back."""
        try:
            self.guard.after_step(optimizer)
        except Exception:
            self.ext.count_error("grads:skip")

    def _new_track(self, optimizer: torch.optim.Optimizer) -> Track:
        taken = {t.name for t in self.tracks.values()}
        name = naming.optimizer_name(optimizer, self._ns(), taken)
        sampler = Sampler()
        sampler.set_mode(*self.mode)
        track = Track(optimizer, name, sampler, self.thresholds)
        track.run = self.run
        # A new optimizer under the same name continues the x axis of the same series.
        track.step = self.step_base.get(name, 0)
        self.tracks[optimizer] = track
        self.retired.watch(track, optimizer)
        self._status_dirty = True
        return track

    def _sample(
        self, track: Track, optimizer: torch.optim.Optimizer, now: float
    ) -> torch.Tensor | None:
        """Read this step's per-tensor norms into the track's block; returns them (the
        first ``len(plan.params)`` values of the row, aligned with ``plan.params``)."""
        plan = track.plan
        if (
            plan is None
            or now - track.plan_checked > FULL_CHECK_S
            or plan.watch_version != watch_version()
            or naming.group_sig(optimizer) != plan.sig
        ):
            self._check_plan(track, optimizer, now)
            plan = track.plan
        if plan is None or not plan.enabled or track.recorder is None or track.layout is None:
            return None
        col = self._collector
        amp = bool(track.layout.amp)
        scaler = plan.scaler() if amp and plan.scaler is not None else None
        scale, unscale = scale_of_step(scaler, optimizer), kernel_scale(optimizer)
        row: collector.Row | None = col.grad_row(plan.params, scale, amp, unscale)
        if row is None:
            self._set_state(track, "no_grads", NO_GRADS_REASON)
            return None
        self._set_state(track, "active", None)
        if row.local_shard and not track.local_shard:
            track.local_shard = True
            self._status_dirty = True
        track.recorder.record(row.values, track.step, track.layout)
        if (found_inf := kernel_found_inf(optimizer)) is not None:
            track.amp_skips.note(track.step, found_inf)  # R31: its kernel may skip it
        track.sampled += 1
        self.step_base[track.name] = track.step
        t_read = self.clock()
        sampler = track.sampler
        due = now - track.last_param_t >= sampler.param_interval_s or track.early_weights_due()
        if due and track.param_recorder:
            # The weights, about once a second: timed apart (the stride sees the grad read)
            track.last_param_t = now
            track.param_reads += 1
            if track.param_reads == 1:
                track.first_param_step = track.step
            prow = col.param_row(plan.params)
            if prow is not None:
                track.param_recorder.record(prow, track.step, track.param_layout)
            sampler.add_cost(self.clock() - t_read)
        sampler.observe(t_read - now)
        return row.values[: len(plan.params)]

    def _set_state(self, track: Track, state: str, reason: str | None) -> None:
        if track.set_state(state, reason):
            self._status_dirty = True

    def _check_plan(self, track: Track, optimizer: torch.optim.Optimizer, now: float) -> None:
        """Validate the plan in full; rebuild names, layout and block when it changed."""
        wt = weakref.ref(track)

        def on_rows(xs: list[float], m: torch.Tensor) -> None:
            self._on_rows(wt, xs, m)

        if track.check_plan(optimizer, now, self._ns(), self.mode, self.ext.stream, on_rows):
            self._status_dirty = True
        self.guard.hook_up(list(self.tracks.values()), self._ns())  # the batches kept

    def _ns(self) -> dict[str, object]:
        ns = getattr(self.ext.shell, "user_ns", None)
        return ns if isinstance(ns, dict) else {}

    # --- flush side (rows on the host) -----------------------------------------------

    def _on_rows(self, wt: weakref.ref[Track], xs: list[float], m: torch.Tensor) -> None:
        """Rows just flushed (host): kept for the next alarm check."""
        track = wt()
        if track is None or track.plan is None:
            return
        track.rows.append((xs, m))
        track.rows_count += len(xs)
        self._rows_waiting = True
        if track.rows_count >= EVALUATE_MAX_ROWS:
            self._evaluate(track)

    def _evaluate(self, track: Track) -> None:
        """Alarms and table statistics over every row flushed since the last check."""
        try:
            check.check(self, track)
        except Exception:
            self.ext.count_error("grads:alarms")

    def _after_flush(self, force: bool = False, flushed: bool = False) -> None:
        now = self.clock()
        # tracks whose optimizer is gone: their last rows, once flushed (retired.py)
        gone = self.retired.take() if force or flushed else []
        for t in gone:
            self._evaluate(t)
        if self._rows_waiting and (force or now - self._last_eval >= EVALUATE_INTERVAL_S):
            self._rows_waiting = False
            self._last_eval = now
            for t in list(self.tracks.values()):
                self._evaluate(t)
        if force:  # the cell ended: a probe whose forward pass ran reports now
            for t in list(self.tracks.values()):
                self.guard.finish_probe(t, cell_end=True)
        alerts = self.alerts.take(force)
        if alerts:
            msg = {"method": "alert", "alerts": [a.to_json() for a in alerts]}
            self.ext.hub.broadcast(jsonable(msg))
        self.maybe_send_status(force)

    # --- status ----------------------------------------------------------------------

    def maybe_send_status(self, force: bool = False) -> None:
        now = self.clock()
        steps = sum(t.step for t in self.tracks.values())
        since = now - self._last_status
        changed = self._status_dirty and (force or since >= STATUS_MIN_INTERVAL_S)
        periodic = steps != self._steps_at_status and (force or since >= STATUS_INTERVAL_S)
        if not (changed or periodic):
            return
        self._last_status = now
        self._steps_at_status = steps
        self._status_dirty = False
        self.ext.hub.broadcast(jsonable(self.status(full=False)))

    def snapshot_messages(self) -> list[dict[str, object]]:
        """Replayed on (re)connect (R06): the panel lists these alerts without popping up."""
        out = [self.status(full=True)]
        alerts = self.alerts.snapshot()
        if alerts:
            out.append({"method": "alert", "alerts": alerts, "replay": True})
        return out

    def post_run_cell(self) -> None:
        """The cell ended: send the last rows (waiting for in-flight device copies), any
        alerts the rate limit held back, and a final status."""
        for t in list(self.tracks.values()):  # a cell that ended between backward and clip
            t.deferred = None
        if self.torch_attached and (len(self.tracks) or len(self.retired)):
            self.ext.stream.flush(wait=True)
        self.replayer.run_pending()  # the cell ended before its next step
        self._after_flush(force=True)

    def status(self, full: bool) -> dict[str, object]:
        """The ``grads`` message; ``full`` always lists layers (snapshots)."""
        msg = grads_message(
            list(self.tracks.values()),
            full=full,
            clipping=self.clipping(),
            torch_attached=self.torch_attached,
            mode=self.mode,
            thresholds=self.thresholds,
            alerts_total=self.alerts.total,
            alerts=self.alerts.run_count if self.run is not None else self.alerts.total,
            periodic=self.periodic,
            flush_s=self.ext.stream.flush_interval_s,
        )
        msg["replayable"] = self.replayer.available()
        msg["skip_nonfinite"] = self.guard.skip_all
        return msg

    # --- settings (actions; may run on a subshell thread) ----------------------------

    def set_mode(self, mode: str, fixed: int = 1) -> None:
        self.mode = (mode, fixed)
        for t in list(self.tracks.values()):
            t.sampler.set_mode(mode, fixed)
            t.mode_from_watch = False
        self._status_dirty = True

    def set_thresholds(self, changes: SetThresholdsArgs) -> Thresholds:
        self.thresholds = th = self.thresholds.updated(changes)
        for t in list(self.tracks.values()):
            t.detector.th = th
        self._status_dirty = True
        return th

    def track_for(self, optimizer: torch.optim.Optimizer) -> Track | None:
        return self.tracks.get(optimizer)
