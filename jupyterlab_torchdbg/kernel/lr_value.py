"""An optimizer group's learning rate as a number.

Neutral ground: the loop controls (``control/lr.py``) and the gradient monitor's view of
the loop's own clipping (``grads/loop_clip.py``) both read it, so neither imports the other.
"""

from __future__ import annotations

import math


def read_lr(value: object) -> float | None:
    """A group's lr as a float; None when not a number (or a tensor off the CPU: reading
    it would synchronise the device)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        v = float(value)
        return v if math.isfinite(v) else None
    if getattr(value, "ndim", None) == 0 and str(getattr(value, "device", "")) == "cpu":
        try:
            v = float(value.item())  # type: ignore[attr-defined]
        except Exception:
            return None
        return v if math.isfinite(v) else None
    return None
