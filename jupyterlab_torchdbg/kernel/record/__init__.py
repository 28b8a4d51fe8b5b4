"""The run record (issue #24): what the panel knows, on disk, surviving the kernel.

``attach(host, memory_facts)`` opens the notebook's store (store.py), adds this kernel's
row, starts the writer (writer.py) fed by the comm hub's observer and the watcher process
(watcher.py) that writes how the kernel ended. A panel that opens its comm gets the
``record`` of the notebook's earlier kernels right after ``runs``; the actions
``open_record`` (one recorded run, as ``record_run``) and ``dismiss_record`` read and mark
it. ``Recorder.load_run`` is the same read for other features (the TensorBoard export).

No notebook (``JPY_SESSION_NAME`` unset: a console, a test kernel) means no record
(``store: "off"``); a store that cannot be opened is ``unavailable`` with the reason, and
the kernel goes on without it (R11, R50).
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..action_registry import ActionError
from . import reading, store, watcher
from .writer import MemoryFacts, Writer

if TYPE_CHECKING:
    from ..host import Host

#: Seconds after load when the record is read again (a watcher may still be writing the
#: end of the kernel that died just before this one started).
REFRESH_S = 3.0


class Recorder:
    def __init__(self, host: Host, memory_facts: MemoryFacts) -> None:
        self.host = host
        self.kernel_id = secrets.token_hex(8)
        self.state = "off"
        self.note: str | None = None
        self.notebook = store.notebook_path()
        self.path: Path | None = None
        self.writer: Writer | None = None
        self._watcher: subprocess.Popen[bytes] | None = None
        self._facts = memory_facts
        self._read_lock = threading.Lock()
        self._read_conn: sqlite3.Connection | None = None
        self._sent_key: str | None = None

    def _progress(self) -> tuple[int, int] | None:
        run = self.host.runs.last
        return None if run is None else (run.id, run.steps)

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        if self.notebook is None:
            return
        try:
            directory = store.record_dir()
            store.private_dir(directory)
            self.path = store.db_file(directory, self.notebook)
            opened = store.open_store(self.path)
            self.note = opened.note
            conn = opened.conn
            session = store.jupyter_kernel_id()
            try:
                store.follow_rename(directory, self.path, session, conn)
            except Exception:
                self.host.count_error("record:rename")
            store.prune(conn, store.KEEP_KERNELS - 1)
            oom_file = watcher.cgroup_oom_file()
            oom0 = watcher.oom_kills(oom_file)
            now = time.time()
            conn.execute(
                "INSERT INTO kernels(id, session, pid, started, last_write, oom_start) "
                "VALUES (?,?,?,?,?,?)",
                (self.kernel_id, session, os.getpid(), now, now, oom0),
            )
            self._read_conn = store.connect(self.path)
            self.writer = Writer(
                conn, self.kernel_id, self._facts, self.host.count_error, progress=self._progress
            )
            self.writer.later = (REFRESH_S, self._refresh)
            self.writer.start()
            self._watcher = watcher.spawn(self.path, self.kernel_id, oom_file, oom0)
            self.state = "on"
        except store.StoreUnavailable as e:
            self.state, self.note = "unavailable", str(e)
        except Exception as e:  # never a failed load because of the record (R11)
            self.host.count_error("record:start")
            self.state = "unavailable"
            self.note = f"The run record could not be opened ({type(e).__name__}: {e})."

    def stop(self, note: str = "stopped recording (the extension was unloaded)") -> None:
        if self.writer is not None:
            self.writer.stop("shutdown", note)
            self.writer = None
        w, self._watcher = self._watcher, None
        if w is not None:
            try:
                w.kill()
                threading.Thread(target=w.wait, daemon=True).start()
            except Exception:
                pass

    def at_exit(self) -> None:
        """The interpreter is exiting normally (a kernel shutdown): a clean end."""
        self.stop("shut down")

    # --- reading ------------------------------------------------------------------------

    def message(self) -> dict[str, object]:
        kernels: list[dict[str, object]] = []
        if self._read_conn is not None:
            try:
                with self._read_lock:
                    kernels = reading.kernels(self._read_conn, self.kernel_id)
            except Exception:
                self.host.count_error("record:read")
        return {
            "method": "record",
            "notebook": os.path.basename(self.notebook) if self.notebook else None,
            "store": self.state,
            "kernels": kernels,
            "note": self.note,
        }

    def load_run(self, kernel: str, run: int) -> reading.Loaded:
        """One recorded run of an earlier kernel: ``(info, [(name, xs, ys)], alerts)``."""
        if self._read_conn is None:
            raise ActionError(
                "No run record in this kernel (it was not started for a notebook).", "refused"
            )
        if kernel == self.kernel_id:
            raise ActionError("That is this kernel: its runs are live in the panel.", "refused")
        with self._read_lock:
            loaded = reading.load_run(self._read_conn, kernel, run)
        if loaded is None:
            raise ActionError(f"The record has no run {run} of that kernel.", "refused")
        return loaded

    def _refresh(self) -> None:
        """Send the record again if it changed since load (a late watcher's end)."""
        msg = self.message()
        if msg["kernels"] and self.host.hub.count:
            self.host.hub.broadcast(msg)

    # --- actions ------------------------------------------------------------------------

    def open_record(self, args: dict[str, object]) -> dict[str, object]:
        kernel, run = args["kernel"], args["run"]
        if not isinstance(kernel, str) or not isinstance(run, int):  # checked by _kernel_args
            raise ActionError("kernel and run are required")
        loaded = self.load_run(kernel, run)
        self.host.hub.broadcast(reading.run_message(kernel, run, loaded))
        return {"series": len(loaded[1]), "alerts": len(loaded[2])}

    def dismiss_record(self, args: dict[str, object]) -> dict[str, object]:
        if self._read_conn is None:
            raise ActionError("No run record in this kernel.", "refused")
        with self._read_lock:
            cur = self._read_conn.execute(
                "UPDATE kernels SET dismissed=1 WHERE id=? AND id != ?",
                (args["kernel"], self.kernel_id),
            )
        if cur.rowcount == 0:
            raise ActionError("The record has no such kernel.", "refused")
        self.host.hub.broadcast(self.message())
        return {}


def _kernel_args(args: dict[str, object], run: bool) -> dict[str, object]:
    allowed = {"kernel", "run"} if run else {"kernel"}
    extra = set(args) - allowed
    if extra:
        raise ActionError(f"unknown argument {sorted(extra)[0]!r}")
    kernel = args.get("kernel")
    if (
        not isinstance(kernel, str)
        or len(kernel) != 16
        or not all(c in "0123456789abcdef" for c in kernel)
    ):
        raise ActionError("kernel must be a recorded kernel's id (16 hex digits)")
    out: dict[str, object] = {"kernel": kernel}
    if run:
        r = args.get("run")
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= 1_000_000_000:
            raise ActionError("run must be an integer from 1")
        out["run"] = r
    return out


def monitor_facts(mon: object) -> MemoryFacts:
    """The memory figures the record keeps, read from the memory monitor at each write:
    the process RSS and its limit, or, while memory grows steadily, the leak tracker's
    fitted series (used, limit, growth per step: ``memory.leak``)."""

    def facts() -> dict[str, object]:
        watch = getattr(mon, "leak", None)
        leak = getattr(watch, "leak", None)
        if isinstance(leak, dict):
            return {k: leak.get(k) for k in ("used", "limit", "per_step")}
        used = getattr(mon, "rss", None)
        limit = None
        if watch is not None and hasattr(watch, "host_limit"):
            limit = watch.host_limit(used)[0]
        return {"used": used, "limit": limit, "per_step": None}

    return facts


def attach(host: Host, memory_facts: MemoryFacts) -> tuple[Recorder, Callable[[], None]]:
    """Start the record; returns it and the cleanup that stops it (a clean end)."""
    rec = Recorder(host, memory_facts)
    rec.start()
    cleanups: list[Callable[[], None]] = []
    if rec.writer is not None:
        cleanups.append(host.hub.observe(rec.writer.observe))
        import atexit

        atexit.register(rec.at_exit)
        cleanups.append(lambda: atexit.unregister(rec.at_exit))
    cleanups.append(host.hub.add_snapshot_part(lambda: [rec.message()]))
    cleanups.append(
        host.actions.register("open_record", lambda a: _kernel_args(a, True), rec.open_record)
    )
    cleanups.append(
        host.actions.register(
            "dismiss_record", lambda a: _kernel_args(a, False), rec.dismiss_record
        )
    )

    def cleanup() -> None:
        for fn in reversed(cleanups):
            try:
                fn()
            except Exception:
                host.count_error("record:cleanup")
        rec.stop()

    return rec, cleanup
