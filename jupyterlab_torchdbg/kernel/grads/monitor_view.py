"""The gradient monitor as its helpers see it: ``check``, ``loop_clip`` and ``per_run``
are imported by ``monitor.py``, so they cannot import ``GradMonitor`` back; this Protocol
names the part of it they read and call (a GradMonitor satisfies it; mypy checks it where
the monitor hands itself over)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from ..host import Host
    from ..step_read import StepRead
    from .alerts import AlertLog
    from .divergence import LossWatch
    from .track import Track, Tracks


class _GuardView(Protocol):  # NonFiniteGuard (nonfinite.py imports loop_clip, via step_diagnosis)
    def covers(self, track: Track, step: int) -> bool: ...
    def arm_probe(self, track: Track) -> None: ...


class MonitorView(Protocol):
    ext: Host
    alerts: AlertLog
    loss_watch: LossWatch

    @property
    def guard(self) -> _GuardView: ...

    tracks: Tracks
    run: int | None
    step_base: dict[str, int]
    clipping: Callable[[], bool]
    clock: Callable[[], float]

    def status_changed(self) -> None: ...

    def _begin(self, optimizer: torch.optim.Optimizer, now: float) -> Track: ...

    def _read(
        self, track: Track, optimizer: torch.optim.Optimizer, now: float, sample: bool, replay: bool
    ) -> StepRead: ...
