"""The gradient monitor per run (runs.py): each run starts with new tracks.

When the step boundary's run changes, the monitor forgets its tracks: the optimizers
that step in the new run get new ``Track``s, so a track's step (the x of its rows)
restarts at 1, its blocks get new ids (``Stream.block(per_run=True)``; the old run's stay
in the stream's history), and its alarm state and divergence baselines start afresh: a
re-run cell is judged on its own numbers. The alert log counts the new run's alerts from
0 (``grads.alerts``) and keeps the total (``alerts_total``).
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import torch

    from ..backward_boundary import ModelSource
    from ..host import Host
    from ..stream import Stream
    from .monitor_view import MonitorView


def current_run(ext: Host) -> int | None:
    """The step boundary's run (None before the first)."""
    return ext.runs.current_id


def start_run(mon: MonitorView, run: int | None) -> None:
    """The monitor (``GradMonitor``, not imported: it imports this) saw a new run at its
    step boundary (see the module docstring)."""
    mon.run = run
    mon.tracks = weakref.WeakKeyDictionary()
    mon.step_base.clear()
    mon.alerts.start_run(run)
    mon.status_changed()


def hand_over(mon: MonitorView, source: ModelSource) -> None:
    """An optimizer took over ``source`` at its first step and the source's only boundary
    in this run was that step's backward pass (runs.py ``hand_over``): its track was no
    track of its own. It goes with its blocks; the optimizer's track reads the same
    gradients at this step as its step 1."""
    track = mon.tracks.pop(cast("torch.optim.Optimizer", source), None)  # keyed as one
    if track is None:
        return
    blocks = [b for b in (track.recorder, track.param_recorder) if b is not None]
    mon.ext.stream.clear([b.names[0] for b in blocks], earlier_runs=False)
    mon.step_base.pop(track.name, None)
    mon.status_changed()


def connect(mon: MonitorView, ext: Host) -> None:
    """Alerts count towards their run in the registry."""
    mon.alerts.counter = ext.runs.count_alerts


def loss_nonfinite(stream: Stream) -> bool:
    """The newest value of a logged series whose name holds "loss" is NaN/Inf."""
    for name in stream.names():
        if "loss" in name.lower():
            v = stream.last(name)
            if v is not None and not math.isfinite(v):
                return True
    return False
