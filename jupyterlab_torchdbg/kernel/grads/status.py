"""The ``grads`` status message: the monitor's state, settings and one entry per track.

Sent when something changed (new layers, stride, skips; at most every 0.5 s) and every
2 s while training; a snapshot carries it in full (every track's layer list). A track's
layer list otherwise goes out only when its layers changed (``layers_version``).
"""

from __future__ import annotations

from collections.abc import Iterable

from .alarms import Thresholds
from .stride import DEFAULT_BUDGET
from .track import Track


def grads_message(
    tracks_now: Iterable[Track],
    *,
    full: bool,
    clipping: bool,
    torch_attached: bool,
    mode: tuple[str, int],
    thresholds: Thresholds,
    alerts_total: int,
) -> dict[str, object]:
    """The message; ``full`` always lists layers (snapshots), otherwise a track's layers
    go out once per change (``layers_version``)."""
    tracks = []
    for t in tracks_now:
        send_layers = full or t.sent_layers_version != t.layers_version
        tracks.append(t.to_json(send_layers, clipping))
        if send_layers and not full:
            t.sent_layers_version = t.layers_version
    mode_name, fixed = mode
    if not torch_attached:
        state, reason = "waiting", "torch is not imported yet"
    elif not tracks:
        state, reason = "waiting", "no optimizer step yet: train and the norms appear"
    elif mode_name == "off":
        state, reason = "off", "sampling is off (set_stride)"
    else:
        state, reason = "active", None
    return {
        "method": "grads",
        "state": state,
        "reason": reason,
        "mode": mode_name,
        "stride": fixed if mode_name == "fixed" else None,
        "budget": DEFAULT_BUDGET,
        "thresholds": thresholds.to_json(),
        "alerts": alerts_total,
        "tracks": tracks,
    }
