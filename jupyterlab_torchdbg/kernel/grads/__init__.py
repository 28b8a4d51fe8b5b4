"""Gradient monitor: per-layer norms at every optimizer step boundary, alarms, stride.

Files, by idea:

- the step boundary's read: ``monitor`` (what runs at the boundary, the flush side),
  ``collector`` (foreach norms left on the device), ``naming`` (parameter -> layer names,
  the plan), ``stride`` (self-timing and the automatic stride), ``track`` (one optimizer's
  state and table statistics), ``retired`` (tracks whose optimizer is gone), ``per_run``
  (new tracks per run), ``status`` (the ``grads`` message), ``api`` (``watch()``),
  ``monitor_view`` (the monitor as its helpers see it);
- alarms: ``alarms``, ``check``, ``alerts``, ``thresholds``, ``explosion``,
  ``divergence``, ``amp_skips``, ``loop_clip`` (the loop's own clip);
- a non-finite step: ``nonfinite``, ``bad_step``, ``step_diagnosis``, ``diagnose``,
  ``finding``, ``cause_alert``, ``loss_check``, ``loss_sources``, ``backward_root``,
  ``inputs`` / ``hookup`` (the kept forward calls), ``probe`` (the forward probe),
  ``rerun`` (re-running user code changes nothing), ``kept_forward`` (the memory
  panel's activation meter re-runs a kept call, handed it by extension.py),
  ``replay`` / ``replay_run`` / ``replay_loss`` / ``replay_report``; skipping it:
  ``skip``, ``closure_skip``, ``norm_stats``, ``skip_facts``;
- hooks on the user's modules: ``kernel/module_hooks.py`` and ``kernel/hook_guard.py``
  (neutral ground: the memory panel's activation meter hooks modules too);
- ``action_args`` (the panel actions' arguments).

``attach(host, clipping)`` creates the monitor and registers its actions and snapshot
part; the step boundary calls ``GradMonitor.on_step`` and ``extension.py`` calls
``post_run_cell`` (nothing here imports torch or registers a torch hook).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from ..action_args import no_args
from .action_args import validate_replay, validate_skip, validate_stride, validate_thresholds
from .kept_forward import rerun_kept_forward
from .monitor import GradMonitor

if TYPE_CHECKING:
    from ...protocol.messages import SetThresholdsArgs
    from ..host import Host

__all__ = ["GradMonitor", "attach", "rerun_kept_forward"]


def attach(host: Host, clipping: Callable[[], bool]) -> tuple[GradMonitor, Callable[[], None]]:
    """Create the monitor and register its actions; returns it and its cleanup."""
    mon = GradMonitor(host, clipping)

    def set_stride(args: dict[str, object]) -> dict[str, object]:
        # validate_stride's output: "mode" "auto" | "off" | "fixed", "stride" a whole number
        mode, stride = str(args["mode"]), cast("int", args["stride"])
        mon.set_mode(mode, stride)
        return {"mode": mode, "stride": stride if mode == "fixed" else None}

    def set_thresholds(args: dict[str, object]) -> dict[str, object]:
        # validate_thresholds' output: known names, each a number in the schema's range
        changes = cast("SetThresholdsArgs", args)
        return {"thresholds": mon.set_thresholds(changes).to_json()}

    def clear_alerts(args: dict[str, object]) -> dict[str, object]:
        mon.replayer.clear()  # the alert is gone: so is its kept batch and weight copy
        return {"cleared": mon.alerts.clear()}

    def replay_step(args: dict[str, object]) -> dict[str, object]:
        track = args["track"]  # validate_replay's output: a track name or None
        return mon.replayer.run(track if isinstance(track, str) else None)

    def skip_nonfinite(args: dict[str, object]) -> dict[str, object]:
        on = args["on"] is True  # validate_skip's output: a bool
        mon.guard.set_skip(on, list(mon.tracks.values()))
        # The panel's checkbox shows the kernel's setting: send it now, idle or not.
        mon.maybe_send_status(force=True)
        return {"on": on}

    removers = [
        host.actions.register("set_stride", validate_stride, set_stride),
        host.actions.register("set_thresholds", validate_thresholds, set_thresholds),
        host.actions.register("clear_alerts", no_args, clear_alerts),
        host.actions.register("replay_step", validate_replay, replay_step),
        host.actions.register("skip_nonfinite", validate_skip, skip_nonfinite),
        host.hub.add_snapshot_part(mon.snapshot_messages),
    ]

    def cleanup() -> None:
        for remove in reversed(removers):
            remove()
        mon.detach_torch()

    return mon, cleanup
