"""The gradient monitor's panel actions: argument validation (R14, S3).

``set_stride``: ``{"stride": 1..100000 | "auto" | "off"}`` — every N steps, the
self-timed default, or no sampling. ``set_thresholds``: any subset of the alarm settings,
each a finite number in range (``explode_abs`` may be null to turn the absolute rule off).
``clear_alerts``: no arguments. ``replay_step``: ``{}`` or ``{"track": name}``. Nothing
here evaluates what the panel sends. Every bound comes from the protocol schema
(``ActionSetStride``, ``ActionSetThresholds``, ``ActionReplayStep``).
"""

from __future__ import annotations

import re
from dataclasses import fields

from ..action_args import action_args_schema, arg_names, bounds, only_keys, schema_number
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


#: A track name ``replay_step`` accepts (the schema's ``pattern``: 1..200 characters, no
#: control characters; the name only selects the kept step, it is never evaluated).
TRACK_NAME = re.compile(action_args_schema("replay_step")["properties"]["track"]["pattern"])


def validate_replay(args: dict[str, object]) -> dict[str, object]:
    """``replay_step``: ``{}`` (the kept step) or ``{"track": name}``."""
    only_keys(args, {"track"})
    track = args.get("track")
    if track is not None and not (isinstance(track, str) and TRACK_NAME.fullmatch(track)):
        raise ActionError("track must be a track name (1..200 characters, no control characters)")
    return {"track": track}


def validate_skip(args: dict[str, object]) -> dict[str, object]:
    """``skip_nonfinite``: ``{"on": true | false}``."""
    only_keys(args, {"on"})
    on = args.get("on")
    if not isinstance(on, bool):
        raise ActionError("on must be true or false")
    return {"on": on}
