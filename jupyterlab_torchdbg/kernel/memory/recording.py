"""One-click memory history: ``torch.cuda.memory._record_memory_history`` start/stop.

``start`` turns the allocator's history on with a bounded ``max_entries`` (Python stacks
only: C++ symbolisation would make every allocation slow). When CUDA is not initialised
yet, the start is queued with ``torch.cuda._lazy_call`` so it runs the moment the user's
code initialises CUDA: the tool never initialises it (R02), and the first allocations
(the model moving to the GPU) are still recorded. ``stop`` takes the snapshot, writes it
as a pickle in the kernel's working directory (open it at PyTorch's memory viewer) and
summarises the top allocation sites by bytes; only a written file ends the recording
(R45: a failed write keeps recording and says why, so stopping again can succeed). The
pickle is written, never read: nothing from the panel is unpickled (S4).

The recorder talks to torch through a small ``AllocatorHistory`` (``TorchHistory`` here);
``ReplayHistory`` replays a given snapshot dict instead, so the CPU tests (pytest, and
Galata from a notebook cell) drive start, stop, the file and the summary with no GPU. The
last summary stays in the ``memory`` status (``recording.last``) so every panel, a late
one included, shows it.
"""

from __future__ import annotations

import copy
import os
import pickle
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from ..action_registry import ActionError

if TYPE_CHECKING:
    from ...protocol.messages import AllocationSite, MemorySnapshotSummary

DEFAULT_MAX_ENTRIES = 100_000
TOP_SITES = 10
#: Longest file / function name sent in a site (R09: payloads stay bounded).
SITE_TEXT_CHARS = 200
_STDLIB = os.path.join(sysconfig.get_paths()["stdlib"], "")


class AllocatorHistory(Protocol):
    """What the recorder needs from the CUDA allocator's memory history."""

    def check(self) -> None:
        """Raise ``ActionError`` ("refused") when there is no CUDA to record."""

    def initialized(self) -> bool:
        """The user's code has initialised CUDA (recording may start now)."""

    def when_initialized(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` the moment CUDA gets initialised (never initialise it here)."""

    def cancel(self, fn: Callable[[], None]) -> None:
        """Forget a ``fn`` queued by ``when_initialized`` that has not run."""

    def enable(self, max_entries: int) -> None: ...

    def disable(self) -> None: ...

    def snapshot(self) -> dict[str, object]:
        """``torch.cuda.memory._snapshot()``: segments → blocks, and device_traces."""


class TorchHistory:
    """The real one: ``torch.cuda.memory``'s private history API (torch ≥ 2.1)."""

    def _torch(self) -> ModuleType:
        torch = sys.modules.get("torch")
        if torch is None:
            raise ActionError("torch is not imported in this kernel", "refused")
        if not getattr(getattr(torch, "version", None), "cuda", None):
            raise ActionError("memory history needs CUDA: this torch build is CPU-only", "refused")
        return torch

    def check(self) -> None:
        self._torch()

    def initialized(self) -> bool:
        return bool(self._torch().cuda.is_initialized())

    def when_initialized(self, fn: Callable[[], None]) -> None:
        self._torch().cuda._lazy_call(fn)

    def cancel(self, fn: Callable[[], None]) -> None:
        torch = sys.modules.get("torch")
        queued = getattr(getattr(torch, "cuda", None), "_queued_calls", None)
        if isinstance(queued, list):
            queued[:] = [c for c in queued if not (isinstance(c, tuple) and c[0] is fn)]

    def enable(self, max_entries: int) -> None:
        self._torch().cuda.memory._record_memory_history(
            enabled="all", context="all", stacks="python", max_entries=max_entries
        )

    def disable(self) -> None:
        self._torch().cuda.memory._record_memory_history(enabled=None)

    def snapshot(self) -> dict[str, object]:
        snap = self._torch().cuda.memory._snapshot()
        return snap if isinstance(snap, dict) else {}


class ReplayHistory:
    """A stand-in for CUDA that "records" and returns a given snapshot dict.

    For tests and demos on machines without a GPU (like ``sources.RecordedSource``): CUDA
    counts as initialised, ``enable``/``disable`` only count, ``snapshot`` returns a copy
    of ``snap`` shaped like ``torch.cuda.memory._snapshot()``.
    """

    def __init__(self, snap: dict[str, object]) -> None:
        self._snap = snap
        self.enabled: int | None = None
        self.calls: list[str] = []

    def check(self) -> None:
        pass

    def initialized(self) -> bool:
        return True

    def when_initialized(self, fn: Callable[[], None]) -> None:
        fn()

    def cancel(self, fn: Callable[[], None]) -> None:
        pass

    def enable(self, max_entries: int) -> None:
        self.calls.append("enable")
        self.enabled = max_entries

    def disable(self) -> None:
        self.calls.append("disable")
        self.enabled = None

    def snapshot(self) -> dict[str, object]:
        self.calls.append("snapshot")
        return copy.deepcopy(self._snap)


class HistoryRecorder:
    """The state of one memory-history recording (off / armed / on), and the summary of
    the last one stopped."""

    def __init__(
        self,
        cuda_unusable: Callable[[], str | None],
        cwd: Callable[[], str] = os.getcwd,
        history: AllocatorHistory | None = None,
    ):
        self._unusable = cuda_unusable
        self._cwd = cwd
        #: The allocator history recorded from (tests and demos swap in ``ReplayHistory``).
        self.history: AllocatorHistory = history if history is not None else TorchHistory()
        self._lock = threading.Lock()
        self.state = "off"
        self.max_entries: int | None = None
        self.since: float | None = None
        #: The summary of the last stopped recording (strings and numbers only).
        self.last: MemorySnapshotSummary | None = None
        self._queued: Callable[[], None] | None = None

    def status(self) -> dict[str, object]:
        return {**self._state(), "last": self.last}

    def _state(self) -> dict[str, object]:
        return {"state": self.state, "max_entries": self.max_entries, "since": self.since}

    def _check(self) -> AllocatorHistory:
        history = self.history
        history.check()
        bad = self._unusable()
        if bad:
            raise ActionError(bad, "refused")
        return history

    def start(self, max_entries: int) -> dict[str, object]:
        with self._lock:
            history = self._check()
            if self.state != "off":
                return {**self._state(), "note": "already recording"}
            self.max_entries = max_entries

            def begin() -> None:
                history.enable(max_entries)
                self.state = "on"
                self.since = time.time()
                self._queued = None

            if history.initialized():
                begin()
                return self._state()
            # Not initialised: start when the user's code initialises CUDA (never now).
            self.state = "armed"
            self._queued = begin
            history.when_initialized(begin)
            return {**self._state(), "note": "starts when your code first uses CUDA"}

    def disarm(self) -> None:
        """Remove a queued start (unload, or stop before CUDA started)."""
        fn, self._queued = self._queued, None
        if fn is not None:
            self.history.cancel(fn)

    def stop(self) -> dict[str, object]:
        with self._lock:
            if self.state == "off":
                raise ActionError("no memory recording is running", "refused")
            if self.state == "armed":
                self.disarm()
                self.state, self.max_entries, self.since = "off", None, None
                return {**self._state(), "note": "CUDA was never used: nothing was recorded"}
            history = self._check()
            snap = history.snapshot()
            # R45: write first, switch the history off only once the file is there. A
            # failed write (disk full, directory gone or read-only) keeps recording, says
            # why, and the user can free space and stop again.
            path = _write_snapshot(snap, self._cwd)
            history.disable()
            self.state, self.max_entries, self.since = "off", None, None
            sites = top_sites(snap)
            last: MemorySnapshotSummary = {
                "time": round(time.time(), 3),
                "file": os.path.basename(path),
                "bytes": os.path.getsize(path),
                "entries": sites["entries"],
                "oom_events": sites["oom_events"],
                "live_sites": sites["live_sites"],
                "top_sites": sites["top_sites"],
            }
            self.last = last
            del snap
            return {**self._state(), **last}

    def shutdown(self) -> None:
        """On unload: leave no recording running that the tool started."""
        with self._lock:
            if self.state == "armed":
                self.disarm()
            elif self.state == "on":
                try:
                    if not self._unusable():
                        self.history.disable()
                except Exception:
                    pass
            self.state, self.max_entries, self.since = "off", None, None


def _write_snapshot(snap: dict[str, object], directory: Callable[[], str]) -> str:
    """Write ``snap`` as a new pickle in ``directory()``; return its path. On failure
    nothing is left behind and ``ActionError`` ("failed") says why (no path: S6)."""
    path, created = "", False
    try:
        name = time.strftime("torchdbg_memory_%Y%m%d-%H%M%S.pickle")
        path = _unique(os.path.join(directory(), name))
        # 0600: the snapshot holds source paths and stacks (S6: no world-readable files).
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        created = True
        with os.fdopen(fd, "wb") as f:
            pickle.dump(snap, f)
        return path
    except Exception as e:
        if created:  # only our own partial file, never one that appeared meanwhile
            try:
                os.unlink(path)
            except OSError:
                pass
        why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise ActionError(
            f"the snapshot file could not be written ({why}); still recording: "
            "fix the cause (e.g. free disk space) and stop again",
            "failed",
        ) from None


def _unique(path: str) -> str:
    base, ext = os.path.splitext(path)
    n = 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}{ext}"
    return path


def _site(frames: object) -> tuple[str, int, str] | None:
    """The first frame outside torch and the standard library: where the user allocated."""
    if not isinstance(frames, list) or not frames:
        return None
    chosen = None
    for fr in frames:
        if not isinstance(fr, dict):
            continue
        fn = str(fr.get("filename", ""))
        if not fn or fn.startswith(("<frozen", _STDLIB)) or "/torch/" in fn:
            continue  # torch's own layers and the standard library are not the "site"
        chosen = fr
        break
    if chosen is None:
        chosen = next((f for f in frames if isinstance(f, dict)), None)
    if chosen is None:
        return None
    filename = str(chosen.get("filename", "?"))
    short = "/".join(filename.split("/")[-2:])  # no home directories in payloads (S6)
    return (
        short[-SITE_TEXT_CHARS:],
        max(0, int(chosen.get("line", 0) or 0)),
        str(chosen.get("name", "?"))[:SITE_TEXT_CHARS],
    )


class Sites(TypedDict):
    """What a recording's snapshot says (the rest of a ``MemorySnapshotSummary``)."""

    entries: int
    oom_events: int
    live_sites: list[AllocationSite]
    top_sites: list[AllocationSite]


# Any: torch.cuda.memory._snapshot()'s nested dicts and lists are untyped; read with .get
def top_sites(snap: dict[str, Any], n: int = TOP_SITES) -> Sites:
    """Top allocation sites by bytes: still live at the stop, and allocated in total."""
    live: dict[tuple[str, int, str], list[int]] = {}
    for seg in snap.get("segments", []) or []:
        for b in seg.get("blocks", []) or []:
            if b.get("state") != "active_allocated":
                continue
            s = _site(b.get("frames"))
            if s is None:
                continue
            acc = live.setdefault(s, [0, 0])
            acc[0] += int(b.get("size", 0) or 0)
            acc[1] += 1
    total: dict[tuple[str, int, str], list[int]] = {}
    entries = 0
    ooms = 0
    for trace in snap.get("device_traces", []) or []:
        for e in trace or []:
            entries += 1
            action = e.get("action")
            if action == "oom":
                ooms += 1
            if action != "alloc":
                continue
            s = _site(e.get("frames"))
            if s is None:
                continue
            acc = total.setdefault(s, [0, 0])
            acc[0] += int(e.get("size", 0) or 0)
            acc[1] += 1

    def rows(d: dict[tuple[str, int, str], list[int]]) -> list[AllocationSite]:
        ordered = sorted(d.items(), key=lambda kv: -kv[1][0])[:n]
        return [
            {"file": f, "line": ln, "function": fn, "bytes": b, "count": c}
            for (f, ln, fn), (b, c) in ordered
        ]

    return {
        "entries": entries,
        "oom_events": ooms,
        "live_sites": rows(live),
        "top_sites": rows(total),
    }
