"""The gradient monitor's panel actions: argument validation (R14, S3).

``set_stride``: ``{"stride": 1..100000 | "auto" | "off"}`` — every N steps, the
self-timed default, or no sampling. ``set_thresholds``: any subset of the alarm settings,
each a finite number in range (``explode_abs`` may be null to turn the absolute rule off).
``clear_alerts``: no arguments. Nothing here evaluates what the panel sends.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..actions import ActionError, finite_number, only_keys
from .alarms import AMP_WINDOW, Thresholds
from .stride import MAX_STRIDE

#: A fixed stride may be larger than the auto stride's cap (sample rarely on purpose).
MAX_FIXED_STRIDE = MAX_STRIDE * 100

#: name -> (minimum, maximum, exclusive minimum, integer)
_BOUNDS: dict[str, tuple[float, float, bool, bool]] = {
    "explode_abs": (0.0, 1e30, True, False),
    "explode_factor": (1.0, 1e9, True, False),
    "explode_warmup": (1, 1_000_000, False, True),
    "vanish_floor": (0.0, 1.0, False, False),
    "vanish_ratio": (0.0, 1.0, False, False),
    "vanish_steps": (1, 1_000_000, False, True),
    "amp_skips": (1, AMP_WINDOW, False, True),
    "amp_min_scale": (0.0, 1e30, True, False),
}
assert set(_BOUNDS) == {f.name for f in fields(Thresholds)}


def _integer(args: dict[str, Any], key: str, minimum: float, maximum: float) -> int:
    v = finite_number(args, key, minimum=minimum, maximum=maximum)
    assert v is not None
    if v != int(v):
        raise ActionError(f"{key} must be a whole number, got {v:g}")
    return int(v)


def validate_stride(args: dict[str, Any]) -> dict[str, Any]:
    only_keys(args, {"stride"})
    if "stride" not in args:
        raise ActionError("stride is required")
    v = args["stride"]
    if isinstance(v, str):
        if v not in ("auto", "off"):
            raise ActionError("stride must be a whole number >= 1, 'auto' or 'off'")
        return {"mode": v, "stride": 1}
    return {"mode": "fixed", "stride": _integer(args, "stride", 1, MAX_FIXED_STRIDE)}


def validate_thresholds(args: dict[str, Any]) -> dict[str, Any]:
    only_keys(args, set(_BOUNDS))
    if not args:
        raise ActionError("give at least one threshold to change")
    out: dict[str, Any] = {}
    for key in args:
        lo, hi, excl, integer = _BOUNDS[key]
        if key == "explode_abs" and args[key] is None:
            out[key] = None
        elif integer:
            out[key] = _integer(args, key, lo, hi)
        else:
            out[key] = finite_number(args, key, minimum=lo, maximum=hi, exclusive_minimum=excl)
    return out
