"""GradScaler facts at the optimizer step boundary (R31, R32), asked in one place.

``scaler.step(optimizer)`` unscales the gradients (stage ``UNSCALED``) before it calls
``optimizer.step()``; a step it skips (non-finite gradients) never reaches the hooks. The
gradient monitor needs the scale to report AMP norms; clipping must refuse gradients that
may still be multiplied by the loss scale. Both read the optimizer's stage here, through
GradScaler's private per-optimizer state (no public API exposes it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch.amp import GradScaler


def unscaled(scaler: GradScaler | None, optimizer: object) -> bool:
    """``scaler`` unscaled this optimizer's gradients for the step now being taken."""
    states = getattr(scaler, "_per_optimizer_states", None)
    st = states.get(id(optimizer)) if isinstance(states, dict) else None
    return isinstance(st, dict) and getattr(st.get("stage"), "name", None) == "UNSCALED"


def scale_of_step(scaler: GradScaler | None, optimizer: object) -> torch.Tensor | None:
    """GradScaler's scale tensor if this step came through ``scaler.step`` (else None)."""
    if scaler is None or not unscaled(scaler, optimizer):
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
    if unscaled(scaler, optimizer):
        return None
    return (
        "the gradients may still be multiplied by GradScaler's loss scale (optimizer.step() "
        "was called directly, not through scaler.step(optimizer), which unscales first); "
        "step through the scaler or call scaler.unscale_(optimizer) before stepping"
    )
