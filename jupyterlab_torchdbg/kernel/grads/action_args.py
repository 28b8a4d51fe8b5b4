"""The gradient monitor's panel actions: argument validation (R14, S3).

``set_stride``: ``{"stride": 1..100000 | "auto" | "off"}`` — every N steps, the
self-timed default, or no sampling. ``set_thresholds``: any subset of the alarm settings,
each a finite number in range (``explode_abs`` may be null to turn the absolute rule off).
``clear_alerts``: no arguments. Nothing here evaluates what the panel sends. Every bound
comes from the protocol schema (``ActionSetStride``, ``ActionSetThresholds``).
"""

from __future__ import annotations

from dataclasses import fields

from ..action_args import arg_names, bounds, only_keys, schema_number
from ..action_registry import ActionError
from .alarms import Thresholds

#: The largest fixed stride (it may exceed the auto stride's cap: sample rarely on purpose).
MAX_FIXED_STRIDE = int(bounds("set_stride", "stride").maximum or 1)

THRESHOLD_NAMES = frozenset(arg_names("set_thresholds"))
assert THRESHOLD_NAMES == {f.name for f in fields(Thresholds)}


def validate_stride(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"stride"})
    if "stride" not in args:
        raise ActionError("stride is required")
    v = args["stride"]
    if isinstance(v, str):
        if v not in ("auto", "off"):
            raise ActionError("stride must be a whole number >= 1, 'auto' or 'off'")
        return {"mode": v, "stride": 1}
    return {"mode": "fixed", "stride": schema_number(args, "set_stride", "stride")}


def validate_thresholds(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, set(THRESHOLD_NAMES))
    if not args:
        raise ActionError("give at least one threshold to change")
    return {key: schema_number(args, "set_thresholds", key) for key in args}
