"""One training step per variant: forward + backward + (what the variant adds) + AdamW.

``none`` is the baseline. The product's variants run with the extension loaded and its
global step hook active; every other variant runs with that hook taken out for its own
step, so it pays nothing for the extension:

- ``loaded_idle``: extension loaded, its hook runs, but this optimizer is not monitored
  (out of ``watch()`` scope): the fixed price of being loaded.
- ``monitor_every_step``: ``watch(model, opt, stride=1)``.
- ``monitor_default``: ``watch(model, opt)``: the self-timed automatic stride.
- ``naive_loop``: ``[p.grad.norm().item() for p in params]`` (tutorials, Lightning's grad_norm).
- ``total_norm``: ``torch.nn.utils.get_total_norm(grads).item()`` (what clipping reads).
- ``detect_anomaly``: ``torch.autograd.set_detect_anomaly(True)``, the worst-case reference.
- ``monitor_clip``: ``watch(model, opt)`` with the product's clip action on (the control's
  ``clip`` set to ``MAX_NORM`` for this variant's steps only: it applies to every
  optimizer the extension's hook sees): the monitor's read of the grads serves the clip.
- ``clip_grad_norm``: plain ``torch.nn.utils.clip_grad_norm_(params, MAX_NORM)`` between
  backward and step, what a user writes without the tool. ``monitor_clip`` ÷ this is the
  ``monitor_clip_vs_clip`` ratio (PERFORMANCE.md: ≤ 1.05).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.optim.optimizer as optim_mod
from typing_extensions import TypedDict

from ..kernel import extension, watches
from ..kernel.grads.stride import nice_at_least, stride_reason
from ..testing import grad_monitor
from .models import Workload

#: The clip level of both clipping variants (the usual ``clip_grad_norm_(..., 1.0)``).
MAX_NORM = 1.0

VARIANTS = (
    "none",
    "loaded_idle",
    "monitor_every_step",
    "monitor_default",
    "naive_loop",
    "total_norm",
    "detect_anomaly",
    "monitor_clip",
    "clip_grad_norm",
)
PRODUCT = frozenset({"loaded_idle", "monitor_every_step", "monitor_default", "monitor_clip"})


def _ours(hook: object) -> bool:
    owner = getattr(hook, "__self__", hook)
    return str(getattr(type(owner), "__module__", "")).startswith("jupyterlab_torchdbg") or str(
        getattr(hook, "__module__", "")
    ).startswith("jupyterlab_torchdbg")


@contextmanager
def hook_removed() -> Iterator[None]:
    """Take the extension's global step hooks out for one step of a non-product variant."""
    hooks = optim_mod._global_optimizer_pre_hooks
    saved = [(k, h) for k, h in hooks.items() if _ours(h)]
    for k, _ in saved:
        del hooks[k]
    try:
        yield
    finally:
        # Put them back in their original order (the monitor reads before control clips).
        rest = list(hooks.items())
        hooks.clear()
        for k, h in sorted(saved + rest, key=lambda kv: kv[0]):
            hooks[k] = h


class MonitorStats(TypedDict, total=False):
    """What the monitor reports for one optimizer (``Runner.stats``; empty: no track)."""

    stride: int
    every_step_now: bool
    overhead_estimate: float | None
    state: str
    read_cost_s: float | None
    step_time_s: float | None
    budget: float
    implied_stride: int | None
    param_cost_s: float | None
    stride_reason: str


class Runner:
    """One variant's own model copy, optimizer and step."""

    def __init__(self, variant: str, work: Workload, device: torch.device) -> None:
        self.variant = variant
        self.model = copy.deepcopy(work.model).to(device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=1e-4)
        self.x, self.y = (t.to(device) for t in work.batch)
        self.loss = work.loss
        self.own: list[float] = []  # per step: time of the norm computation itself
        self.watch: watches.WatchHandle | None = None
        if variant == "monitor_every_step":
            self.watch = watches.add_watch(self.model, self.opt, 1)
        elif variant in ("monitor_default", "monitor_clip"):
            self.watch = watches.add_watch(self.model, self.opt, None)

    def _forward_backward(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        self.loss(self.model(self.x), self.y).backward()

    def step(self) -> None:
        v = self.variant
        if v in PRODUCT:
            self._forward_backward()
            if v == "monitor_clip":
                # The clip action's state, as the panel's Clip button sets it; on for this
                # variant's step only, so no other variant is clipped.
                ext = extension.current()
                control = ext.control if ext is not None else None
                assert control is not None  # the harness loaded the extension with control
                control.clip = MAX_NORM
                try:
                    self.opt.step()
                finally:
                    control.clip = None
            else:
                self.opt.step()
            if v == "monitor_every_step":
                track = grad_monitor().track_for(self.opt)
                if track is not None and track.sampler.last_sample is not None:
                    # the sample's own time: the read of the grads, as for get_total_norm
                    self.own.append(track.sampler.last_sample)
            return
        with hook_removed():
            if v == "detect_anomaly":
                with torch.autograd.set_detect_anomaly(True):
                    self._forward_backward()
            else:
                self._forward_backward()
            if v == "naive_loop":
                _ = [p.grad.norm().item() for p in self.params if p.grad is not None]
            elif v == "clip_grad_norm":
                torch.nn.utils.clip_grad_norm_(self.params, MAX_NORM)
            elif v == "total_norm":
                t0 = time.perf_counter()
                grads = [p.grad for p in self.params if p.grad is not None]
                torch.nn.utils.get_total_norm(grads).item()
                self.own.append(time.perf_counter() - t0)
            self.opt.step()

    def close(self) -> None:
        if self.watch is not None:
            self.watch.remove()

    def stats(self) -> MonitorStats:
        """What the monitor itself reports for this optimizer: the stride, the read cost
        and step time it was chosen from, and the stride those imply (``implied_stride``,
        what ``choose_stride`` gives without hysteresis)."""
        ext = extension.current()
        mon = ext.grads if ext is not None else None
        track = mon.track_for(self.opt) if mon is not None else None
        if track is None:
            return {}
        s = track.sampler
        read, step = s.cost_ema, s.step_s
        return {
            "stride": s.stride,
            "every_step_now": s.boosting,
            "overhead_estimate": s.overhead,
            "state": track.state,
            # what the stride was chosen from: the read of the grads alone, and the step
            "read_cost_s": read,
            "step_time_s": step,
            "budget": s.budget,
            "implied_stride": (
                nice_at_least(read / (s.budget * step)) if read is not None and step else None
            ),
            "param_cost_s": s.param_cost_ema,
            "stride_reason": stride_reason(s),
        }
