"""What the gradient monitor read at one optimizer step, handed on to the next feature.

The step boundary (``step_boundary.py``) asks the gradient monitor first; what it read is
passed to training control in the same step, so clipping reuses the per-tensor norms
(one read of the gradients serves both) and knows the GradScaler scaling this optimizer.
Only the small norms vector and references the optimizer already holds: no copies (R25).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch.amp import GradScaler


@dataclass(frozen=True)
class StepRead:
    #: The monitor's step number for this optimizer (1 for its first step).
    step: int
    #: The parameters the monitor normed, in order; None when it did not read this step.
    params: list[torch.Tensor] | None
    #: 1-D device tensor aligned with ``params``: each gradient's 2-norm (0 where None).
    norms: torch.Tensor | None
    #: The GradScaler found for this optimizer (``torch.amp.GradScaler``), or None.
    scaler: GradScaler | None = None
    #: The optimizer step is skipped (non-finite gradients, ``skip_nonfinite``): its
    #: gradients are hidden until the step's post-hook; nothing is clipped.
    skipped: bool = False
    #: GradScaler's inf/NaN flag for a fused optimizer's step (gradscaler.py; non-zero:
    #: its kernel skips the update, nothing to clip), a device tensor; else None.
    found_inf: torch.Tensor | None = None
