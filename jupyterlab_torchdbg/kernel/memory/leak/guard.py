"""The opt-in memory guard (``set_memory_guard``): pause training before the limit.

At a step boundary, when what is used reaches ``pause_at`` of its limit (the process RSS
against ``memory_limit``; a CUDA device's reserved memory against its total), the guard
holds the loop there exactly as the panel's Pause does (``Control.pause_here``), after
raising a ``memory_limit`` alert. ``tripped`` says why until the loop is resumed. It does
not trip again at every step after Resume: only once usage rises ``REARM`` above where it
tripped, or the setting changes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...action_registry import ActionError
from .text import SOURCES, size

if TYPE_CHECKING:
    from ....protocol.messages import MemoryGuard
    from ....protocol.messages import MemoryLeakLimitSource as LimitSource

#: After a trip, usage must rise this much more (x) before the guard trips again.
REARM = 1.03

NO_SUBSHELL = (
    "the memory guard pauses training: it needs comms over a kernel subshell (ipykernel "
    ">= 7 and JupyterLab >= 4.4 with 'Kernel comms over subshells' on), otherwise Resume "
    "could not reach the paused kernel"
)


@dataclass
class Guard:
    pause_at: float | None = None
    limit: int | None = None
    source: LimitSource | None = None
    tripped: str | None = None
    #: Usage (bytes) the guard trips again at, after a trip (None: armed).
    rearm_at: float | None = None

    def to_json(self) -> MemoryGuard:
        return {
            "pause_at": self.pause_at,
            "limit": self.limit,
            "limit_source": self.source,
            "tripped": self.tripped,
        }

    def set(self, pause_at: float | None) -> None:
        """The action (any thread): refused from the main shell, where nothing could
        deliver Resume (as Pause is)."""
        if pause_at is not None and threading.current_thread() is threading.main_thread():
            raise ActionError(NO_SUBSHELL, code="refused")
        self.pause_at = pause_at
        self.rearm_at = None
        if pause_at is None:
            self.tripped = None

    def due(self, used: float, limit: int | None) -> bool:
        """Usage has reached the threshold (and the guard is armed)."""
        if self.pause_at is None or limit is None or limit <= 0:
            return False
        if used < self.pause_at * limit:
            return False
        return self.rearm_at is None or used >= self.rearm_at

    def trip(self, used: float, limit: int, source: str | None, what: str, step: int) -> str:
        self.rearm_at = used * REARM
        share = used / limit
        pct = round((self.pause_at or 0) * 100)
        self.tripped = (
            f"{what} reached {share:.0%} of the limit ({size(used)} of {size(limit)}, "
            f"{SOURCES.get(source or '', 'limit')}; the guard pauses at {pct}%): training "
            f"is paused after step {step:,}. Resume continues (the guard pauses again if "
            f"memory grows {REARM - 1:.0%} more); free memory or save a checkpoint first."
        )
        return self.tripped
