"""One optimizer as the gradient monitor sees it: a ``Track``, and its table statistics.

Per optimizer (held weakly, keyed by the optimizer) a ``Track`` keeps the step count, the
sampling stride, the plan (names and layers, naming.py), the stream blocks its rows go to,
the alarm state, and the rows flushed since the last alarm check. ``to_json`` is its part
of the ``grads`` status message; ``table_stats`` folds flushed rows into the layer table's
last / max / min / non-finite columns.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from ..backward_boundary import boundary_of
from ..stream import bound_name
from ..watches import watch_version, watches
from . import naming
from .alarms import Detector, Thresholds
from .amp_skips import AmpSkips
from .divergence import EARLY_UPDATES
from .stride import Sampler, stride_reason

if TYPE_CHECKING:
    from collections.abc import Mapping

    import torch

    from ...protocol.messages import GradStats
    from ..stream import BlockSeries, Stream
    from .collector import Layout
    from .probe import ForwardProbe

#: A monitor's tracks, by what steps them: an optimizer, or a ModelSource that stands for
#: one (duck-typed: the monitor reads only its ``param_groups``; backward_boundary.py).
Tracks: TypeAlias = "weakref.WeakKeyDictionary[torch.optim.Optimizer, Track]"

#: Stretches of clip-action steps a track keeps (older ones are long judged).
CLIP_SPANS = 8

#: A track's state reason when none of its parameters has a gradient.
NO_GRADS_REASON = (
    "no parameter this optimizer steps has a gradient — if the parameters were replaced "
    "(load_state_dict(assign=True), re-created layers), create the optimizer again"
)


class Track:
    """One optimizer seen at the step boundary (held weakly by the optimizer's key)."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, name: str, sampler: Sampler, th: Thresholds
    ) -> None:
        self.opt_ref = weakref.ref(optimizer)
        #: Where its steps are read: "optimizer_step", or "end_of_backward" for a model
        #: updated by hand (keyed by its ModelSource; backward_boundary.py).
        self.boundary = boundary_of(optimizer)
        self.name = name
        self.sampler = sampler
        #: The run it belongs to (per_run.py); ``step`` counts within it.
        self.run: int | None = None
        self.step = 0
        self.sampled = 0
        self.plan: naming.Plan | None = None
        self.plan_checked = -math.inf
        self.all_sig: tuple[tuple[int, bool], ...] = ()
        self.scaler_id: int | None = None
        self.layout: Layout | None = None
        self.param_layout: Layout | None = None
        self.recorder: BlockSeries | None = None
        self.param_recorder: BlockSeries | None = None
        self.last_param_t = -math.inf
        self.detector = Detector(name, th)
        #: Steps a fused optimizer's kernel skipped for GradScaler (amp_skips.py, R31).
        self.amp_skips = AmpSkips()
        self.state = "waiting"
        self.reason: str | None = None
        self.local_shard = False
        self.layers_version = 0
        self.sent_layers_version = -1
        self.stats: GradStats | None = None
        self.mode_from_watch = False
        self.rows: list[tuple[list[float], torch.Tensor]] = []  # flushed, not yet checked
        self.rows_count = 0
        self.probe: ForwardProbe | None = None  # a ForwardProbe armed after a non-finite alarm
        #: Non-finite steps are skipped (the action, or watch(skip_nonfinite=True)).
        self.skip_nonfinite = False
        #: Optimizer steps skipped because their gradients were non-finite (nonfinite.py).
        self.skipped_nonfinite = 0
        #: The clip the loop itself calls on these parameters, once seen (user_clip.py):
        #: ("clip_grad_norm_" | "clip_grad_value_", its bound), else None.
        self.user_clip: tuple[str, float] | None = None
        #: The stretches of steps ([first, last], last None: still on) the panel's clip
        #: action was on at: a row judged later is told by its own step (note_clip).
        self.clip_spans: list[list[int | None]] = []
        #: A loop without torch.optim that clips by norm: this step's read waits for its
        #: clip (True: the step is sampled), else None (monitor.on_backward).
        self.deferred: bool | None = None
        #: Reads of the weights in this run, and the step of the first one.
        self.param_reads = 0
        self.first_param_step = 0
        self._ids: tuple[list[torch.Tensor], set[int]] | None = None

    def note_clip(self, on: bool) -> None:
        """Whether the panel's clip action is on at this step (called at every step)."""
        spans, step = self.clip_spans, self.step
        if spans and step < (spans[-1][0] or 0):
            spans.clear()  # the steps started over
        if on:
            if not spans or spans[-1][1] is not None:
                spans.append([step, None])
                del spans[:-CLIP_SPANS]
        elif spans and spans[-1][1] is None:
            spans[-1][1] = step - 1

    # --- names of this track's series ------------------------------------------------

    @property
    def total_series(self) -> str:
        return bound_name(f"grad/{self.name}/total")

    @property
    def scale_series(self) -> str:
        return bound_name(f"grad/{self.name}/amp_scale")

    def layer_series(self, layer: str) -> str:
        return bound_name(f"grad/{self.name}/{layer}")

    def param_series(self, layer: str) -> str:
        return bound_name(f"param/{self.name}/{layer}")

    @property
    def layer_names(self) -> list[str]:
        return [] if self.plan is None else [li.name for li in self.plan.layers]

    def early_weights_due(self) -> bool:
        """The weights are read at each of the run's first EARLY_UPDATES + 1 steps, one
        after the other: the first updates' size (explosion.py)."""
        reads = self.param_reads
        return 0 < reads <= EARLY_UPDATES and self.step == self.first_param_step + reads

    def owns(self, head: Sequence[torch.Tensor], grads: bool) -> bool:
        """Some of ``head`` (the first tensors a clip call was given) are this track's
        parameters, or their gradients when ``grads`` (before its first read: the
        parameters its optimizer or model steps)."""
        plan, key = self.plan, self.opt_ref()
        if plan is not None:
            params = plan.params
        elif key is not None:
            params = [p for g in key.param_groups for p in g["params"]]
        else:
            return False
        if grads:
            gids = {id(g) for g in head}
            return any(id(p.grad) in gids for p in params[: len(head)] if p.grad is not None)
        if self._ids is None or self._ids[0] is not params:
            self._ids = (params, {id(p) for p in params})
        return any(id(p) in self._ids[1] for p in head)

    def retire(self) -> None:
        """Its optimizer is gone (retired.py): let go of the parameters and anything of the
        model while it waits for its last check (R24); rows and alarm state stay."""
        if self.plan is not None:
            self.plan = dataclasses.replace(self.plan, params=[], roots=[])
        self._ids = None
        self.probe = None

    def set_state(self, state: str, reason: str | None) -> bool:
        """Set the track's state; True when it changed (the status is then due)."""
        if self.state == state:
            return False
        self.state, self.reason = state, reason
        return True

    def check_plan(
        self,
        optimizer: torch.optim.Optimizer,
        now: float,
        ns: Mapping[str, object],
        mode: tuple[str, int],
        stream: Stream,
        on_rows: Callable[[list[float], torch.Tensor], None],
    ) -> bool:
        """Validate the plan in full; rebuild names, layout and blocks when it changed.

        ``mode`` is the monitor's sampling mode (restored when a ``watch(stride=)`` that
        set this track's stride is gone); ``on_rows`` receives the grad block's flushed
        rows. Returns whether the status changed.
        """
        from . import collector

        self.plan_checked = now
        watches()  # drops dead watches (bumps the version if any died)
        all_sig = tuple(
            (id(p), bool(getattr(p, "requires_grad", False)))
            for _, _, p in naming.optimizer_params(optimizer)
        )
        scaler = naming.find_scaler(ns)
        scaler_id = None if scaler is None else id(scaler)
        plan = self.plan
        if (
            plan is not None
            and plan.watch_version == watch_version()
            and plan.sig == naming.group_sig(optimizer)
            and all_sig == self.all_sig
            and scaler_id == self.scaler_id
        ):
            return False
        new = naming.build_plan(optimizer, self.name, ns)
        self.all_sig, self.scaler_id = all_sig, scaler_id
        if new.stride is not None:
            self.sampler.set_mode("fixed", new.stride)
            self.mode_from_watch = True
        elif self.mode_from_watch:
            self.sampler.set_mode(*mode)
            self.mode_from_watch = False
        same = (
            plan is not None
            and [li.name for li in plan.layers] == [li.name for li in new.layers]
            and plan.layer_of == new.layer_of
            and [id(p) for p in plan.params] == [id(p) for p in new.params]
            and (plan.scaler is None) == (new.scaler is None)
        )
        self.plan = new
        if not new.enabled:
            return self.set_state("disabled", new.reason)
        if same:
            return False
        amp = new.scaler is not None
        layers = [li.name for li in new.layers]
        self.layout = collector.Layout(new.layer_of, len(layers), amp)
        self.param_layout = collector.Layout(new.layer_of, len(layers), False)
        names = [self.total_series] + [self.layer_series(n) for n in layers]
        if amp:
            names.append(self.scale_series)
        self.recorder = stream.block(names, per_run=True)
        self.recorder.on_rows = on_rows
        pnames = [self.param_series("total")] + [self.param_series(n) for n in layers]
        self.param_recorder = stream.block(pnames, per_run=True)
        # the weights' norms, the scale the gradient norm is judged against (alarms.py)
        self.param_recorder.on_rows = self.detector.observe_weights
        self.stats = None
        self.layers_version += 1
        self.set_state("active", None)
        return True

    def to_json(self, full: bool, clipping: bool = False) -> dict[str, object]:
        s = self.sampler
        plan = self.plan
        amp = bool(self.layout is not None and self.layout.amp)
        out: dict[str, object] = {
            "name": self.name,
            "boundary": self.boundary,
            "state": self.state,
            "reason": self.reason,
            "step": self.step,
            "sampled": self.sampled,
            "mode": s.mode,
            # Clipping and skipping non-finite steps read every step's norms (even "off").
            "stride": 1
            if self.skip_nonfinite or (clipping and s.mode != "off")
            else s.effective_stride,
            "every_step": (
                "skip"
                if self.skip_nonfinite
                else None
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
            # the read of the grads alone (the stride's budget); periodic work is apart
            "read_cost_s": s.cost_ema,
            "param_cost_s": s.param_cost_ema,
            "budget": s.budget,
            "stride_reason": stride_reason(s, clipping, self.mode_from_watch, self.skip_nonfinite),
            "skipped_steps": self.detector.skipped,
            "amp_scale": self.detector.last_scale if amp else None,
            "local_shard": self.local_shard,
            "coarsened": bool(plan and plan.coarsened),
            "total_series": self.total_series,
            "scale_series": self.scale_series if amp else None,
            "layers_version": self.layers_version,
            "skip_nonfinite": self.skip_nonfinite,
            "skipped_nonfinite": self.skipped_nonfinite,
        }
        if self.run is not None:
            out["run"] = self.run
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


def table_stats(m: torch.Tensor, prev: GradStats | None, n_layers: int) -> GradStats:
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


def _t(values: Sequence[float | None], missing: float) -> torch.Tensor:
    import torch

    return torch.tensor([missing if v is None else float(v) for v in values], dtype=torch.float64)


def _num(v: float) -> float | None:
    """A finite float, or None (never seen a finite value: the panel shows "n/a")."""
    return v if math.isfinite(v) else None
