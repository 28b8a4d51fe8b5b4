"""Exception context: capture a failed cell's exception, diagnose it, send it to panels.

``attach(host)`` registers one snapshot part; ``extension.py`` calls the cell events:

- ``pre_run_cell`` remembers the cell id JupyterLab sent;
- ``post_run_cell`` records which file name that cell compiled to (``cells``) and, when
  the cell raised (``result.error_in_exec`` or, for a SyntaxError, ``error_before_exec``),
  builds one ``exception`` message (``capture`` + ``diagnose``) and broadcasts it to every
  comm;
- on (re)connect a panel gets the last message once more with ``replay: true`` (R06): its
  ``id`` and ``time`` tell the panel it is old, so it shows it without popping up.

``exception_id(execution_count)`` is handed to the memory monitor by ``extension.py``:
the memory autopsy links its ``oom`` to the ``exception`` of the same failure that way.

IPython's own error path is never touched (no ``set_custom_exc``): the traceback, ``%tb``,
``%debug``, ``%pdb`` and nbclient behave as without the extension (R15, R16, R18).
KeyboardInterrupt, SystemExit, BdbQuit and UsageError send nothing (R19). A failure
inside the tool is counted, never raised into the cell (R11). The capture runs no user
code without a bound and ends within its time budget (R54); an interrupt that arrives
while it runs ends it quietly.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from .capture import capture
from .cells import CellMap

if TYPE_CHECKING:
    from ..host import Host

__all__ = ["ExceptionMonitor", "attach"]


def _quiet_types() -> tuple[type[BaseException], ...]:
    """Exceptions that are a user's deliberate stop, not a failure to explain (R19)."""
    import bdb

    quiet: list[type[BaseException]] = [KeyboardInterrupt, SystemExit, bdb.BdbQuit]
    error = sys.modules.get("IPython.core.error")
    usage = getattr(error, "UsageError", None)
    if isinstance(usage, type):
        quiet.append(usage)
    return tuple(quiet)


class ExceptionMonitor:
    def __init__(self, ext: Host) -> None:
        self._ext = ext
        self.cells = CellMap(ext.shell)
        self.count = 0
        #: The last ``exception`` message (strings and numbers only: no frames, R23).
        self.last: dict[str, object] | None = None

    def pre_run_cell(self, info: object = None) -> None:
        try:
            self.cells.pre_run_cell(info)
        except Exception:
            self._ext.count_error("exceptions:pre_run_cell")

    def post_run_cell(self, result: object = None) -> None:
        try:
            self.cells.post_run_cell(result)
            exc = getattr(result, "error_in_exec", None)
            if exc is None:
                exc = getattr(result, "error_before_exec", None)
            # type(), not isinstance(): an exception's `__class__` property never runs
            if not issubclass(type(exc), BaseException) or issubclass(type(exc), _quiet_types()):
                return
            info = getattr(result, "info", None)
            try:
                message = self.build(
                    cast(BaseException, exc),
                    getattr(result, "execution_count", None),
                    getattr(info, "cell_id", None),
                )
            except KeyboardInterrupt:
                # An interrupt during the capture stops the capture, not the user's code
                # (the cell has already failed): no second traceback, no message (R54).
                self._ext.count_error("exceptions:interrupted")
                return
            finally:
                del exc
            self.last = message
            self._ext.hub.broadcast(message)
        except Exception:
            self._ext.count_error("exceptions:post_run_cell")

    def build(
        self, exc: BaseException, execution_count: object = None, cell_id: object = None
    ) -> dict[str, object]:
        """The full ``exception`` message for ``exc``."""
        t0 = time.perf_counter()
        body = capture(exc, shell=self._ext.shell, cells=self.cells)
        self.count += 1
        if not isinstance(cell_id, str) or not cell_id:
            current = self.cells.current
            cell_id = current.cell_id if current is not None else None
        message: dict[str, object] = {
            "method": "exception",
            "id": f"{self._ext.session_id[:12]}-{self.count}",
            "time": round(time.time(), 3),
            "replay": False,
            "execution_count": execution_count if isinstance(execution_count, int) else None,
            "cell_id": cell_id,
            # %debug works on sys.last_traceback: true while it is this exception's.
            "debuggable": getattr(sys, "last_value", None) is exc,
            **body,
        }
        message["capture_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        return message

    def exception_id(self, execution_count: int | None) -> str | None:
        """The ``id`` of the last ``exception`` message if it came from the cell execution
        ``execution_count``, else None (another cell failed last, or none did)."""
        last = self.last
        if not isinstance(last, dict) or last.get("execution_count") != execution_count:
            return None
        mid = last.get("id")
        return mid if isinstance(mid, str) else None

    def snapshot_messages(self) -> list[dict[str, object]]:
        """For a panel that (re)connects: the last exception once, marked as a replay."""
        last = self.last
        return [] if last is None else [{**last, "replay": True}]


def attach(host: Host) -> tuple[ExceptionMonitor, Callable[[], None]]:
    """Create the monitor and register its snapshot part; returns it and its cleanup.
    ``extension.py`` calls its ``pre_run_cell`` / ``post_run_cell`` (first of all the
    features at a cell's end, so an OOM autopsy can link to this cell's exception)."""
    monitor = ExceptionMonitor(host)
    remove_part = host.hub.add_snapshot_part(monitor.snapshot_messages)

    def cleanup() -> None:
        remove_part()
        monitor.last = None

    return monitor, cleanup
