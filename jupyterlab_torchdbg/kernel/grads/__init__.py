"""Gradient monitor: per-layer norms at every optimizer step boundary, alarms, stride.

Files: ``monitor`` (the step hook and per-optimizer tracks), ``collector`` (foreach
norms on the device), ``naming`` (parameter -> layer names, ``watch()`` scope),
``alarms`` (non-finite / explosion / vanishing / AMP), ``stride`` (self-timing and the
automatic stride), ``actions`` (panel actions' validation), ``api`` (``watch()``).

``attach(ext)`` registers the actions, the snapshot part and a cell-end flush, and asks
``ext.on_torch`` to add the step hook once torch is imported (nothing here imports it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..actions import no_args
from .actions import validate_stride, validate_thresholds
from .monitor import GradMonitor

if TYPE_CHECKING:
    from ..extension import Extension

_monitor: GradMonitor | None = None


def current_monitor() -> GradMonitor | None:
    """The loaded extension's gradient monitor, or None."""
    return _monitor


def attach(ext: Extension) -> Callable[[], None]:
    global _monitor
    mon = GradMonitor(ext)

    def set_stride(args: dict[str, Any]) -> dict[str, Any]:
        mon.set_mode(args["mode"], args["stride"])
        return {"mode": args["mode"], "stride": args["stride"] if args["mode"] == "fixed" else None}

    def set_thresholds(args: dict[str, Any]) -> dict[str, Any]:
        return {"thresholds": mon.set_thresholds(args).to_json()}

    def clear_alerts(args: dict[str, Any]) -> dict[str, Any]:
        return {"cleared": mon.alerts.clear()}

    def snapshot_messages() -> list[dict[str, Any]]:
        # Replayed on (re)connect (R06): the panel lists these alerts without popping up.
        out = [mon.status(full=True)]
        alerts = mon.alerts.snapshot()
        if alerts:
            out.append({"method": "alert", "alerts": alerts, "replay": True})
        return out

    def post_run_cell(result: Any = None) -> None:
        # The cell ended: send the last rows (waiting for in-flight device copies), any
        # alerts the rate limit held back, and a final status. Not while another thread
        # trains (a probe cell on a subshell): the training thread owns the alarm state.
        if ext.others_running():
            return
        try:
            if mon.torch_attached and len(mon.tracks):
                ext.stream.flush(wait=True)
            mon._after_flush(force=True)
        except Exception:
            ext.count_error("grads:post_run_cell")

    removers = [
        ext.actions.register("set_stride", validate_stride, set_stride),
        ext.actions.register("set_thresholds", validate_thresholds, set_thresholds),
        ext.actions.register("clear_alerts", no_args, clear_alerts),
        ext.hub.add_snapshot_part(snapshot_messages),
    ]
    events = ext.shell.events
    events.register("post_run_cell", post_run_cell)
    removers.append(lambda: events.unregister("post_run_cell", post_run_cell))
    ext.on_torch(mon.attach_torch)
    _monitor = mon

    def cleanup() -> None:
        global _monitor
        for remove in reversed(removers):
            remove()
        if _monitor is mon:
            _monitor = None

    return cleanup
