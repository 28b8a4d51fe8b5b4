"""GradScaler facts at the optimizer step boundary (R31, R32), asked in one place.

For an ordinary optimizer (plain or foreach), ``scaler.step(optimizer)`` unscales the
gradients (stage ``UNSCALED``) before it calls ``optimizer.step()``; a step it skips
(non-finite gradients) never reaches the hooks. An optimizer whose kernel unscales by
itself (``_step_supports_amp_scaling``: ``fused=True``) is stepped differently: GradScaler
sets ``optimizer.grad_scale`` (the gradients are still multiplied by it, unless
``scaler.unscale_(optimizer)`` ran first: then it is None) and ``optimizer.found_inf``
(non-zero: the kernel skips the update) for the duration of ``optimizer.step()``, so the
hooks see every step, the skipped ones too, with the gradients as they are. The gradient
monitor divides the norms by ``grad_scale`` and never alarms a step ``found_inf`` skips;
clipping scales such gradients by the factor of their unscaled norm (the kernel divides
afterwards) and refuses gradients that may still carry the loss scale otherwise. All read
GradScaler's private per-optimizer state here (no public API exposes it); nothing here
reads a device value (the callers decide when a host read is allowed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch.amp import GradScaler


def kernel_scale(optimizer: object) -> torch.Tensor | None:
    """What a fused optimizer's kernel divides this step's gradients by (they are still
    multiplied by it), or None."""
    if not getattr(optimizer, "_step_supports_amp_scaling", False):
        return None
    scale = getattr(optimizer, "grad_scale", None)
    return scale if _is_tensor(scale) else None


def kernel_found_inf(optimizer: object) -> torch.Tensor | None:
    """GradScaler's inf/NaN flag for a fused optimizer's step now being taken (non-zero:
    its kernel skips the update), or None (not a fused step through ``scaler.step``)."""
    if not getattr(optimizer, "_step_supports_amp_scaling", False):
        return None
    flag = getattr(optimizer, "found_inf", None)
    return flag if _is_tensor(flag) else None


def _is_tensor(x: object) -> bool:
    return hasattr(x, "device") and hasattr(x, "reshape")


def unscaled(scaler: GradScaler | None, optimizer: object) -> bool:
    """``scaler`` unscaled this optimizer's gradients for the step now being taken."""
    states = getattr(scaler, "_per_optimizer_states", None)
    st = states.get(id(optimizer)) if isinstance(states, dict) else None
    return isinstance(st, dict) and getattr(st.get("stage"), "name", None) == "UNSCALED"


def scale_of_step(scaler: GradScaler | None, optimizer: object) -> torch.Tensor | None:
    """GradScaler's scale tensor if this step came through ``scaler.step`` (or follows
    ``scaler.unscale_``), else None."""
    if scaler is None:
        return None
    if not unscaled(scaler, optimizer) and kernel_found_inf(optimizer) is None:
        return None
    scale: torch.Tensor | None = getattr(scaler, "_scale", None)
    return scale


def still_scaled(scaler: GradScaler | None, optimizer: object) -> str | None:
    """Why this step's gradients may still carry the loss scale (R32), or None.

    An enabled GradScaler that has scaled something, for an optimizer stepped without
    going through ``scaler.step`` (or ``scaler.unscale_``): clipping those gradients
    would clip the scaled values.
    """
    if scaler is None or not getattr(scaler, "_enabled", False):
        return None
    if getattr(scaler, "_scale", None) is None:
        return None  # has never scaled anything
    if unscaled(scaler, optimizer) or kernel_found_inf(optimizer) is not None:
        return None  # unscaled, or a fused kernel that unscales them (read unscaled)
    return (
        "the gradients may still be multiplied by GradScaler's loss scale (optimizer.step() "
        "was called directly, not through scaler.step(optimizer), which unscales first); "
        "step through the scaler or call scaler.unscale_(optimizer) before stepping"
    )
