"""The capture's time budget (R54): an overall deadline and a per-type allowance.

The summaries call no user code (``tensor_meta``, ``object_parts``), so a local is read in
microseconds; the budget is the guard for what is left: a huge module walk, a slow file
system under ``linecache``, an exception class's own ``__str__``. A call cannot be cut
short in-thread, so the clock is checked between items: once ``CAPTURE_SECONDS`` have
passed since the capture began, every remaining local gets a row that says
``"not read (time budget)"`` and the message is marked ``truncated``; a type whose one
summary took over ``ITEM_SECONDS`` is not read again in the same capture (an object
already read is not read again either: its row is reused). What was read is sent;
nothing claims more than was checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Seconds a whole capture may spend reading locals, linked exceptions and live objects
#: for the diagnosis; past it the rest is marked "not read (time budget)".
CAPTURE_SECONDS = 1.0

#: Seconds one local's summary may take; other values of a type that took longer are not
#: read in the same capture.
ITEM_SECONDS = 0.25


class Budget:
    """One capture's clock. ``clock`` is injectable for tests."""

    def __init__(
        self,
        seconds: float | None = None,
        *,
        item_seconds: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.clock = clock
        self.start = clock()
        self.seconds = CAPTURE_SECONDS if seconds is None else seconds
        self.item_seconds = ITEM_SECONDS if item_seconds is None else item_seconds
        self.deadline = self.start + self.seconds
        #: Types whose one summary took over ``item_seconds``.
        self.slow_types: set[type] = set()
        #: Locals (and linked exceptions' messages) left unread because of the budget.
        self.skipped = 0
        #: Summaries made in this capture by ``id``: an object seen in several frames (the
        #: user's ``model`` and a library frame's ``self``) is read once. The frames keep
        #: the objects alive while the capture runs, so an id is not reused meanwhile.
        self.rows: dict[int, dict[str, object]] = {}

    def expired(self) -> bool:
        return self.clock() >= self.deadline

    def allows(self, tp: type) -> bool:
        """A value of type ``tp`` may still be read."""
        return tp not in self.slow_types and not self.expired()

    def timed(self, tp: type, started: float) -> None:
        """Note how long reading a value of ``tp`` took (``started``: ``clock()`` before)."""
        if self.clock() - started > self.item_seconds:
            self.slow_types.add(tp)


def unlimited() -> Budget:
    """A budget that never runs out (direct calls of ``summarize_locals``)."""
    return Budget(float("inf"))
