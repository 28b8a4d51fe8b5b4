"""A gradient norm as it travels between worker, kernel and panel: a number or one of
"NaN" / "Infinity" / "-Infinity" (``norm_value`` reads it, ``wire_norm`` writes it back),
and when two ranks' norms are the same (``same_norm``: the desync alarm, and the gradient
alarms' test for all-reduced gradients)."""

from __future__ import annotations

import math

#: Two ranks' total norms at one step are the same within this relative difference
#: (the desync alarm; grad_alarms.py: the ranks' gradients are all-reduced).
DESYNC_RTOL = 1e-5


def norm_value(x: object) -> float | None:
    """A norm as it travels (a number or "NaN"/"Infinity"/"-Infinity") as a float."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if x in ("NaN", "Infinity", "-Infinity"):
        return float(str(x).lower().replace("infinity", "inf"))
    return None


def same_norm(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= DESYNC_RTOL * max(abs(a), abs(b), 1e-30)


def wire_norm(x: object) -> float | str | None:
    """Back to the wire form (non-finite floats as strings), None for anything else."""
    v = norm_value(x)
    if v is None:
        return None
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v
