"""Clipping at the step boundary: exactly ``clip_grad_norm_(params, max_norm)``.

The same total norm (``get_total_norm``) and the same in-place scaling
(``clip_grads_with_norm_``). The total comes from the per-tensor norms the gradient
monitor read at this very step (it reads every step while clipping is on; see
``StepRead``), so one read of the gradients serves both. A step whose total norm is
non-finite, or whose gradients still carry GradScaler's loss scale, is not clipped and
the refusal is reported (R32). A fused optimizer stepped by GradScaler unscales in its
kernel: its gradients are scaled by the factor of their unscaled norm (the monitor's
norms are unscaled), and a step GradScaler skips (``found_inf``) is left alone,
unreported. On an accelerator no host sync is added (R26): the finiteness guard stays on
the device and is read back later.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from ..gradscaler import kernel_scale, still_scaled

if TYPE_CHECKING:
    import torch

    from ..step_read import StepRead

#: Clip refusal flags in flight from an accelerator at most (then reports are skipped).
MAX_PENDING_CHECKS = 64
#: Devices whose norms the host may read at once (no sync): others get the device guard.
HOST_CHECKED = frozenset({"cpu"})


class Clipper:
    """Clips one optimizer's gradients per step; reports refusals through ``refuse``."""

    def __init__(self, refuse: Callable[[str], None]) -> None:
        self._refuse = refuse
        #: Clipped steps whose total norm came from the monitor's read (not a second one).
        self.reused = 0
        #: Accelerator steps whose "was the norm finite" flag is on its way to the host.
        self._checks: deque[tuple[int, torch.Tensor, torch.cuda.Event | None]] = deque()

    def clip(
        self, optimizer: torch.optim.Optimizer, max_norm: float, step: int, read: StepRead | None
    ) -> None:
        import torch

        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if not params:
            return
        scaled = still_scaled(read.scaler if read is not None else None, optimizer)
        if scaled is not None:
            self._refuse(f"step {step}: {scaled}; not clipped")
            return
        total = _reused_total(read, params)
        if total is None:
            total = torch.nn.utils.get_total_norm([p.grad for p in params], 2.0)
            if (unscale := kernel_scale(optimizer)) is not None:  # a fused kernel's scale
                total = total / unscale.to(total.device, non_blocking=True)
        else:
            self.reused += 1
        found_inf = read.found_inf if read is not None else None
        if total.device.type in HOST_CHECKED:
            if not bool(torch.isfinite(total)):  # a host value: no sync to ask
                if found_inf is None or not bool(found_inf != 0):  # else GradScaler's skip
                    self._refuse_non_finite(step, float(total))
                return
            torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
            return
        # On an accelerator, asking the host whether the norm is finite would sync at every
        # step (R26). The guard stays on the device instead: a non-finite total becomes 0,
        # for which clip_grads_with_norm_'s factor clamps to exactly 1 (grads untouched);
        # a finite total is passed through unchanged, so the result is bit for bit
        # clip_grad_norm_'s. Whether it was refused is read back later, without waiting.
        finite = torch.isfinite(total)
        guarded = torch.where(finite, total, torch.zeros_like(total))
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, guarded)
        self._watch_finite(step, finite, total, found_inf)
        self.check_refusals()

    def _refuse_non_finite(self, step: int, total: float) -> None:
        self._refuse(
            f"step {step}: total gradient norm is {total}; not clipped "
            "(clipping cannot repair NaN/Inf gradients: see the gradient alarms)"
        )

    def _watch_finite(
        self,
        step: int,
        finite: torch.Tensor,
        total: torch.Tensor,
        found_inf: torch.Tensor | None = None,
    ) -> None:
        """Start a non-blocking copy of this step's finiteness flag to the host (a step
        GradScaler skips counts as finite: nothing to report)."""
        import torch

        if len(self._checks) >= MAX_PENDING_CHECKS:
            return  # the device is far behind: skip a report rather than wait
        ok = finite.float()
        if found_inf is not None:
            ok = torch.maximum(ok, (found_inf.to(ok.device, non_blocking=True) != 0).float())
        flags = torch.stack([ok, total.float()])
        if total.device.type != "cuda":  # other accelerators: no event API here, so wait
            self._checks.append((step, flags.cpu(), None))
            return
        host = torch.empty((2,), dtype=torch.float32, pin_memory=True)
        host.copy_(flags, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._checks.append((step, host, event))

    def check_refusals(self, wait: bool = False) -> None:
        """Report steps whose clip was refused, once their flags have reached the host."""
        while self._checks:
            step, host, event = self._checks[0]
            if event is not None and not event.query():
                if not wait:
                    return
                event.synchronize()
            self._checks.popleft()
            ok, total = host.tolist()
            if not ok:
                self._refuse_non_finite(step, total)


def _reused_total(read: StepRead | None, params: list[torch.Tensor]) -> torch.Tensor | None:
    """``get_total_norm`` of the grads from the norms the monitor read this step.

    The monitor's per-tensor norms are exactly what ``get_total_norm`` computes, so the
    total is one ``vector_norm`` of a short vector in the same order: bit for bit the same
    as ``clip_grad_norm_`` (tested). None when the monitor did not read this step, its
    scope misses some of these gradients, or it read them in another dtype (fp16/bf16
    grads are normed in fp32 there).
    """
    import torch

    if read is None or read.params is None or read.norms is None:
        return None
    plan_params, norms = read.params, read.norms[: len(read.params)]
    if any(p.grad is None or p.grad.dtype != norms.dtype for p in params):
        return None
    if len(plan_params) == len(params) and all(
        a is b for a, b in zip(plan_params, params, strict=True)
    ):
        picked = norms
    else:
        pos = {id(p): i for i, p in enumerate(plan_params)}
        idx = [pos.get(id(p)) for p in params]
        if None in idx:
            return None
        picked = norms[torch.tensor(idx, device=norms.device)]
    return cast("torch.Tensor", torch.linalg.vector_norm(picked, 2.0))  # torch.linalg is untyped
