"""The gradient monitor: a global optimizer-step pre-hook that samples gradient norms.

Zero code change: ``torch.optim.optimizer.register_optimizer_step_pre_hook`` fires before
every ``optimizer.step()`` of every optimizer. Gradients are final there — after DDP's
all-reduce (R34) and after GradScaler's ``unscale_`` (a step GradScaler skips never gets
here, R31). Per optimizer a ``Track`` keeps the step count, the sampling stride, the plan
(names and layers), the stream block its rows go to and the alarm state.

Cost per step when not sampling: a dict lookup, a counter and a clock read. At a sampled
step: one foreach norm pass, one stack, one row queued on the device. Everything else
(host copy, per-layer sums, alarms) happens at flush, at most 10 times a second.
R11: nothing here raises into ``step()``; failures are counted in ``ext.errors``.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...protocol import jsonable
from . import naming
from .alarms import AlertLog, Detector, Thresholds
from .stride import DEFAULT_BUDGET, Sampler

if TYPE_CHECKING:
    from ..extension import Extension
    from ..stream import BlockSeries

#: How often a plan is re-validated in full (watches, requires_grad, GradScaler).
FULL_CHECK_S = 5.0
#: Parameter (weight) norms are taken at most this often: a second read of the weights
#: is only cheap when rare.
PARAM_NORM_INTERVAL_S = 1.0
#: ``grads`` status messages at most this often while training (plus on changes).
STATUS_INTERVAL_S = 2.0
#: Status changes (new layers, stride, skips) are sent at most this often.
STATUS_MIN_INTERVAL_S = 0.5
#: Flushed rows are checked for alarms in batches at most this often: the per-call cost
#: of the checks is fixed (a few dozen small tensor ops), so batching is what keeps it cheap.
EVALUATE_INTERVAL_S = 1.0
#: ... or sooner once this many rows wait.
EVALUATE_MAX_ROWS = 4096

NO_GRADS_REASON = (
    "no parameter this optimizer steps has a gradient — if the parameters were replaced "
    "(load_state_dict(assign=True), re-created layers), create the optimizer again"
)


class Track:
    """One optimizer seen at the step boundary (held weakly by the optimizer's key)."""

    def __init__(self, optimizer: Any, name: str, sampler: Sampler, th: Thresholds) -> None:
        self.opt_ref = weakref.ref(optimizer)
        self.name = name
        self.sampler = sampler
        self.step = 0
        self.sampled = 0
        self.plan: naming.Plan | None = None
        self.plan_checked = -math.inf
        self.all_sig: tuple[Any, ...] = ()
        self.scaler_id: int | None = None
        self.layout: Any = None
        self.param_layout: Any = None
        self.recorder: BlockSeries | None = None
        self.param_recorder: BlockSeries | None = None
        self.last_param_t = -math.inf
        self.detector = Detector(name, th)
        self.state = "waiting"
        self.reason: str | None = None
        self.local_shard = False
        self.layers_version = 0
        self.sent_layers_version = -1
        self.stats: dict[str, Any] | None = None
        self.mode_from_watch = False
        self.rows: list[tuple[list[float], Any]] = []  # flushed, not yet checked
        self.rows_count = 0
        self.probe: Any = None  # a ForwardProbe armed after a non-finite alarm

    # --- names of this track's series ------------------------------------------------

    @property
    def total_series(self) -> str:
        return f"grad/{self.name}/total"

    @property
    def scale_series(self) -> str:
        return f"grad/{self.name}/amp_scale"

    def layer_series(self, layer: str) -> str:
        return f"grad/{self.name}/{layer}"

    def param_series(self, layer: str) -> str:
        return f"param/{self.name}/{layer}"

    @property
    def layer_names(self) -> list[str]:
        return [] if self.plan is None else [li.name for li in self.plan.layers]

    def to_json(self, full: bool, clipping: bool = False) -> dict[str, Any]:
        s = self.sampler
        plan = self.plan
        amp = bool(self.layout is not None and self.layout.amp)
        out: dict[str, Any] = {
            "name": self.name,
            "state": self.state,
            "reason": self.reason,
            "step": self.step,
            "sampled": self.sampled,
            "mode": s.mode,
            "stride": 1 if clipping and s.mode != "off" else s.effective_stride,
            "every_step": (
                None
                if s.mode == "off" or (s.mode == "fixed" and s.fixed == 1)
                else "clip"
                if clipping
                else s.boost_reason
                if s.boosting
                else None
            ),
            "overhead": s.overhead,
            "step_time_s": s.step_s,
            "sample_cost_s": s.cost_ema,
            "skipped_steps": self.detector.skipped,
            "amp_scale": self.detector.last_scale if amp else None,
            "local_shard": self.local_shard,
            "coarsened": bool(plan and plan.coarsened),
            "total_series": self.total_series,
            "scale_series": self.scale_series if amp else None,
            "layers_version": self.layers_version,
        }
        if full and plan is not None:
            out["layers"] = [
                {
                    **li.to_json(),
                    "series": self.layer_series(li.name),
                    "param_series": self.param_series(li.name),
                }
                for li in plan.layers
            ]
        if self.stats is not None:
            out["stats"] = self.stats
        if self.detector.skip_steps:
            out["skipped_at"] = list(self.detector.skip_steps)[-100:]
        return out


class GradMonitor:
    """Owns the step hook, the tracks, the alert log and the grads actions' state."""

    def __init__(self, ext: Extension, clock: Callable[[], float] = time.perf_counter) -> None:
        self.ext = ext
        self.clock = clock
        self.thresholds = Thresholds()
        self.alerts = AlertLog()
        self.mode: tuple[str, int] = ("auto", 1)
        self.tracks: weakref.WeakKeyDictionary[Any, Track] = weakref.WeakKeyDictionary()
        self._step_base: dict[str, int] = {}
        self._handle: Any = None
        self._collector: Any = None
        self._status_dirty = True
        self._last_status = -math.inf
        self._steps_at_status = 0
        self._rows_waiting = False
        self._last_eval = -math.inf
        self.torch_attached = False
        #: Time spent in the hook on periodic work (flush, alarms, status, weight norms)
        #: and how many flushes / checks it took.
        self.periodic_s = 0.0
        self.periodic_n = 0
        # This step's read, for a later hook in the same step (clipping): see step_norms.
        # Only weak references and the small norms row: never the parameters (R24).
        self._current: tuple[Any, Any, int, Any] | None = None
        #: Forward probes armed and not yet reported (their hooks are removed on unload).
        self._probes: list[Any] = []

    # --- lifecycle -------------------------------------------------------------------

    def attach_torch(self, ext: Extension) -> Callable[[], None]:
        """Register the global step pre-hook (called once torch is imported)."""
        import torch.optim.optimizer as optim_mod

        from . import collector

        self._collector = collector
        self._handle = optim_mod.register_optimizer_step_pre_hook(self._hook)
        self.torch_attached = True
        self._status_dirty = True
        return self.detach_torch

    def detach_torch(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.remove()
        probes, self._probes = self._probes, []
        for probe in probes:
            probe.remove()
        self.tracks = weakref.WeakKeyDictionary()
        self.torch_attached = False

    # --- the hook (training thread) --------------------------------------------------

    def _hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            now = self.clock()
            track = self.tracks.get(optimizer)
            if track is None:
                track = self._new_track(optimizer)
            track.step += 1
            if track.probe is not None:
                self._finish_probe(track)
            sample = track.sampler.tick(now)
            if not sample:
                # While the clip action is on, clipping reads every step's norms anyway:
                # this read is the one it reuses (one read of the grads serves both).
                ctl = getattr(self.ext, "control", None)
                sample = ctl is not None and ctl.clip is not None
            if sample:
                self._sample(track, optimizer, now)
            stream = self.ext.stream
            due = stream.due()
            if due or (self._rows_waiting and now - self._last_eval >= EVALUATE_INTERVAL_S):
                t0 = self.clock()
                if due:
                    stream.flush()
                self._after_flush()
                dt = self.clock() - t0
                # Billed to the next sample, so the auto stride counts it in the budget.
                track.sampler.add_cost(dt)
                self.periodic_s += dt
                self.periodic_n += 1
        except Exception:
            self.ext.count_error("grads:hook")

    def _new_track(self, optimizer: Any) -> Track:
        taken = {t.name for t in self.tracks.values()}
        name = naming.optimizer_name(optimizer, self._ns(), taken)
        mode, fixed = self.mode
        sampler = Sampler()
        sampler.set_mode(mode, fixed)
        track = Track(optimizer, name, sampler, self.thresholds)
        # A new optimizer under the same name continues the x axis of the same series.
        track.step = self._step_base.get(name, 0)
        self.tracks[optimizer] = track
        self._status_dirty = True
        return track

    def _sample(self, track: Track, optimizer: Any, now: float) -> None:
        plan = track.plan
        if (
            plan is None
            or now - track.plan_checked > FULL_CHECK_S
            or plan.watch_version != naming._version
            or naming.group_sig(optimizer) != plan.sig
        ):
            self._check_plan(track, optimizer, now)
            plan = track.plan
        if plan is None or not plan.enabled or track.recorder is None:
            return
        col = self._collector
        amp = bool(track.layout.amp)
        row = col.grad_row(plan.params, self._scale(plan, optimizer) if amp else None, amp)
        if row is None:
            self._set_state(track, "no_grads", NO_GRADS_REASON)
            return
        self._set_state(track, "active", None)
        if row.local_shard and not track.local_shard:
            track.local_shard = True
            self._status_dirty = True
        track.recorder.record(row.values, track.step, track.layout)
        self._current = (weakref.ref(optimizer), weakref.ref(track), track.step, row.values)
        track.sampled += 1
        self._step_base[track.name] = track.step
        t_read = self.clock()
        if now - track.last_param_t >= PARAM_NORM_INTERVAL_S and track.param_recorder is not None:
            # A second read (of the weights), once a second: periodic work like a flush,
            # billed to the stride budget but not part of the per-step read.
            track.last_param_t = now
            prow = col.param_row(plan.params)
            if prow is not None:
                track.param_recorder.record(prow, track.step, track.param_layout)
            dt = self.clock() - t_read
            track.sampler.add_cost(dt)
            self.periodic_s += dt
        track.sampler.observe(t_read - now)

    def _set_state(self, track: Track, state: str, reason: str | None) -> None:
        if track.state != state:
            track.state, track.reason = state, reason
            self._status_dirty = True

    def _check_plan(self, track: Track, optimizer: Any, now: float) -> None:
        """Validate the plan in full; rebuild names, layout and block when it changed."""
        track.plan_checked = now
        ns = self._ns()
        naming.watches()  # drops dead watches (bumps the version if any died)
        all_sig = tuple(
            (id(p), bool(getattr(p, "requires_grad", False)))
            for _, _, p in naming.optimizer_params(optimizer)
        )
        scaler = naming.find_scaler(ns)
        scaler_id = None if scaler is None else id(scaler)
        plan = track.plan
        if (
            plan is not None
            and plan.watch_version == naming._version
            and plan.sig == naming.group_sig(optimizer)
            and all_sig == track.all_sig
            and scaler_id == track.scaler_id
        ):
            return
        new = naming.build_plan(optimizer, track.name, ns)
        track.all_sig, track.scaler_id = all_sig, scaler_id
        if new.stride is not None:
            track.sampler.set_mode("fixed", new.stride)
            track.mode_from_watch = True
        elif track.mode_from_watch:
            track.sampler.set_mode(*self.mode)
            track.mode_from_watch = False
        same = (
            plan is not None
            and [li.name for li in plan.layers] == [li.name for li in new.layers]
            and plan.layer_of == new.layer_of
            and [id(p) for p in plan.params] == [id(p) for p in new.params]
            and (plan.scaler is None) == (new.scaler is None)
        )
        track.plan = new
        if not new.enabled:
            self._set_state(track, "disabled", new.reason)
            return
        if same:
            return
        col = self._collector
        amp = new.scaler is not None
        layers = [li.name for li in new.layers]
        track.layout = col.Layout(new.layer_of, len(layers), amp)
        track.param_layout = col.Layout(new.layer_of, len(layers), False)
        names = [track.total_series] + [track.layer_series(n) for n in layers]
        if amp:
            names.append(track.scale_series)
        stream = self.ext.stream
        track.recorder = stream.block(names)
        wt = weakref.ref(track)
        track.recorder.on_rows = lambda xs, m: self._on_rows(wt, xs, m)
        pnames = [f"param/{track.name}/total"] + [track.param_series(n) for n in layers]
        track.param_recorder = stream.block(pnames)
        track.stats = None
        track.layers_version += 1
        self._set_state(track, "active", None)
        self._status_dirty = True

    def _scale(self, plan: naming.Plan, optimizer: Any) -> Any:
        """GradScaler's scale tensor if this step came through it (stage UNSCALED)."""
        scaler = plan.scaler() if plan.scaler is not None else None
        if scaler is None:
            return None
        states = getattr(scaler, "_per_optimizer_states", None)
        st = states.get(id(optimizer)) if isinstance(states, dict) else None
        if not isinstance(st, dict) or getattr(st.get("stage"), "name", None) != "UNSCALED":
            return None
        return getattr(scaler, "_scale", None)

    def _ns(self) -> dict[str, Any]:
        ns = getattr(self.ext.shell, "user_ns", None)
        return ns if isinstance(ns, dict) else {}

    # --- flush side (rows on the host) -----------------------------------------------

    def _on_rows(self, wt: weakref.ref[Track], xs: list[float], m: Any) -> None:
        """Rows just flushed (host tensor): keep them for the next alarm check."""
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
        rows, track.rows, track.rows_count = track.rows, [], 0
        if not rows:
            return
        try:
            import torch

            width = 1 + len(track.layer_names) + (1 if track.layout.amp else 0)
            rows = [(xs, m) for xs, m in rows if m.shape[1] == width]  # layout changed
            if not rows:
                return
            xs = [x for r, _ in rows for x in r]
            m = torch.cat([m for _, m in rows]) if len(rows) > 1 else rows[0][1]
            det = track.detector
            skipped = det.skipped
            alerts = det.evaluate(
                xs,
                m,
                track.layer_names,
                loss_nonfinite=self._loss_nonfinite(),
                amp=bool(track.layout.amp),
            )
            track.stats = _stats(m, track.stats, len(track.layer_names))
            if det.rising and track.sampler.mode == "auto":
                # The norm is climbing: watch every step for a while (see stride.boost).
                if not track.sampler.boosting:
                    self._status_dirty = True
                track.sampler.boost()
            if alerts or det.skipped != skipped:
                self._status_dirty = True
            self.alerts.add(alerts)
            if track.probe is None and any(a.kind == "non_finite" for a in alerts):
                self._arm_probe(track)
        except Exception:
            self.ext.count_error("grads:alarms")

    # --- forward probe (after a non-finite alarm; see probe.py) -----------------------

    def _arm_probe(self, track: Track) -> None:
        from .probe import ForwardProbe, probe_roots

        plan = track.plan
        roots = probe_roots(plan.roots) if plan is not None else []
        if roots:
            track.probe = ForwardProbe(track.name, track.step, roots)
            self._probes.append(track.probe)

    def _finish_probe(self, track: Track, cell_end: bool = False) -> None:
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
                self._status_dirty = True
        except Exception:
            probe.remove()
            self.ext.count_error("grads:probe")

    def _loss_nonfinite(self) -> bool:
        stream = self.ext.stream
        for name in stream.names():
            if "loss" in name.lower():
                v = stream.last(name)
                if v is not None and not math.isfinite(v):
                    return True
        return False

    def _after_flush(self, force: bool = False) -> None:
        now = self.clock()
        if self._rows_waiting and (force or now - self._last_eval >= EVALUATE_INTERVAL_S):
            self._rows_waiting = False
            self._last_eval = now
            for t in list(self.tracks.values()):
                self._evaluate(t)
        if force:  # the cell ended: a probe whose forward pass ran reports now
            for t in list(self.tracks.values()):
                self._finish_probe(t, cell_end=True)
        alerts = self.alerts.take(force)
        if alerts:
            self.ext.hub.broadcast(
                jsonable({"method": "alert", "alerts": [a.to_json() for a in alerts]})
            )
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

    def status(self, full: bool) -> dict[str, Any]:
        """The ``grads`` message; ``full`` always lists layers (snapshots)."""
        tracks = []
        ctl = getattr(self.ext, "control", None)
        clipping = ctl is not None and ctl.clip is not None
        for t in list(self.tracks.values()):
            send_layers = full or t.sent_layers_version != t.layers_version
            tracks.append(t.to_json(send_layers, clipping))
            if send_layers and not full:
                t.sent_layers_version = t.layers_version
        mode, fixed = self.mode
        if not self.torch_attached:
            state, reason = "waiting", "torch is not imported yet"
        elif not tracks:
            state, reason = "waiting", "no optimizer step yet: train and the norms appear"
        elif mode == "off":
            state, reason = "off", "sampling is off (set_stride)"
        else:
            state, reason = "active", None
        return {
            "method": "grads",
            "state": state,
            "reason": reason,
            "mode": mode,
            "stride": fixed if mode == "fixed" else None,
            "budget": DEFAULT_BUDGET,
            "thresholds": self.thresholds.to_json(),
            "alerts": self.alerts.total,
            "tracks": tracks,
        }

    # --- settings (actions; may run on a subshell thread) ----------------------------

    def set_mode(self, mode: str, fixed: int = 1) -> None:
        self.mode = (mode, fixed)
        for t in list(self.tracks.values()):
            t.sampler.set_mode(mode, fixed)
            t.mode_from_watch = False
        self._status_dirty = True

    def set_thresholds(self, changes: dict[str, Any]) -> Thresholds:
        th = Thresholds(**{**self.thresholds.to_json(), **changes})
        self.thresholds = th
        for t in list(self.tracks.values()):
            t.detector.th = th
        self._status_dirty = True
        return th

    def track_for(self, optimizer: Any) -> Track | None:
        return self.tracks.get(optimizer)

    def step_norms(self, optimizer: Any) -> tuple[list[Any], Any] | None:
        """This step's per-tensor gradient norms, if the monitor sampled this step.

        For a step pre-hook that runs after the monitor's (clipping): ``(params, norms)``
        with ``norms`` a 1-D device tensor aligned with ``params`` (0 where grad is None),
        so one read of the gradients serves both; ``torch.linalg.vector_norm(norms)`` is
        ``get_total_norm`` of the grads. None when this step was not sampled (or the
        optimizer is another one): read the gradients yourself then.
        """
        cur = self._current
        if cur is None or cur[0]() is not optimizer:
            return None
        track = cur[1]()
        if track is None or track.plan is None or track.step != cur[2]:
            return None
        params = track.plan.params
        return params, cur[3][: len(params)]


def _stats(m: Any, prev: dict[str, Any] | None, n_layers: int) -> dict[str, Any]:
    """Per-series last / max / min (finite values) / non-finite count, total first."""
    import torch

    m = m[:, : 1 + n_layers].double()
    fin = torch.isfinite(m)
    inf = torch.tensor(math.inf, dtype=torch.float64)
    mx = torch.where(fin, m, -inf).amax(0)
    mn = torch.where(fin, m, inf).amin(0)
    nf = (~fin).sum(0)
    if prev is not None and len(prev["last"]) == 1 + n_layers:
        mx = torch.maximum(mx, _t(prev["max"], -math.inf))
        mn = torch.minimum(mn, _t(prev["min"], math.inf))
        nf = nf + torch.tensor(prev["nonfinite"], dtype=torch.long)
    return {
        "last": m[-1].tolist(),  # NaN/Inf kept: jsonable() spells them out (R10)
        "max": [_num(v) for v in mx.tolist()],
        "min": [_num(v) for v in mn.tolist()],
        "nonfinite": [int(v) for v in nf.tolist()],
    }


def _t(values: list[Any], missing: float) -> Any:
    import torch

    return torch.tensor([missing if v is None else float(v) for v in values], dtype=torch.float64)


def _num(v: float) -> float | None:
    """A finite float, or None (never seen a finite value: the panel shows "n/a")."""
    return v if math.isfinite(v) else None
