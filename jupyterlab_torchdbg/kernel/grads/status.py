"""The ``grads`` status message: the monitor's state, settings and one entry per track.

Sent when something changed (new layers, stride, skips; at most every 0.5 s) and every
2 s while training; a snapshot carries it in full (every track's layer list). A track's
layer list otherwise goes out only when its layers changed (``layers_version``).

Each track says what its sampling costs, apart: the read of the grads (``read_cost_s``,
what the stride is chosen from, and ``overhead`` at the current stride) and the monitor's
periodic work (``periodic_cost_s`` per pass, ``periodic_share`` of wall time, the flush
interval it leads to), with ``stride_reason`` saying in words why the stride is what it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from .alarms import Thresholds
from .stride import DEFAULT_BUDGET, Periodic
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
    alerts: int | None = None,
    periodic: Periodic | None = None,
    flush_s: float | None = None,
) -> dict[str, object]:
    """The message; ``full`` always lists layers (snapshots), otherwise a track's layers
    go out once per change (``layers_version``). ``periodic`` is the monitor's periodic
    work and ``flush_s`` the stream's flush interval it leads to (shown on every track)."""
    tracks = []
    for t in tracks_now:
        send_layers = full or t.sent_layers_version != t.layers_version
        out = t.to_json(send_layers, clipping)
        if periodic is not None:
            out["periodic_cost_s"] = periodic.cost_ema
            out["periodic_share"] = periodic.share
            out["flush_interval_s"] = flush_s
        tracks.append(out)
        if send_layers and not full:
            t.sent_layers_version = t.layers_version
    mode_name, fixed = mode
    if not torch_attached:
        state, reason = "waiting", "torch is not imported yet"
    elif not tracks:
        state, reason = (
            "waiting",
            "no optimizer step or backward pass yet: train and the norms appear (a model "
            "updated by hand is read at the end of backward from the cell after the one "
            "that created it, or at once after watch(model))",
        )
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
        "alerts": alerts_total if alerts is None else alerts,
        "alerts_total": alerts_total,
        "tracks": tracks,
    }
