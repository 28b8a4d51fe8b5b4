"""How a rank's process ended, as the kernel can see it (R56).

A rank killed by a signal (``kill -9``, the OOM killer, a segfault) sends nothing: no
exception, no ``bye``. Without this it showed ``running`` until ``LOST_S`` and then
``lost``, like every rank its launcher stopped after it. The exit status is known to the
process that reaps the rank, so it is read where the kernel can reach it:

- **the kernel's own children** (``mp.spawn`` / ``start_processes`` from the notebook,
  spawn or fork): torch's ``ProcessContext.join`` reaps them; mp_wrap.py wraps it and
  tells ``reported`` each reaped rank's exit code, and which rank made it stop the
  others (those it then terminated were *stopped by the launcher*: their state is
  ``exited``, not ``failed``). A child not joined yet is read without reaping it
  (``waitid(WNOWAIT)``): torch's own join still gets its status.
- **other processes on this host** (``!torchrun``, ``subprocess``): the kernel is not
  their parent, so it sees that the process is gone (``/proc/<pid>``: absent, or the pid
  now names a younger process) and, while it is a zombie not yet reaped, its exit status
  (``/proc/<pid>/stat`` field 52). Once torchrun's elastic agent has reaped it, only the
  agent knows the status (its ``_monitor_workers`` result, a ``ProcessFailure`` with the
  exit code): the rank is then ``failed`` with "ended without a word". Reporting from the
  agent would need a launcher-side sender on the transport (not done here).
- **other hosts**: nothing to read; ``lost`` after ``LOST_S`` as before.

An end is applied ``GRACE_S`` after it was first seen, so a ``bye`` or an exception still
in flight (the process sent it, then exited) wins over it. Nothing here raises.
"""

from __future__ import annotations

import os
import signal
import socket
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from .alarms import Alarms
    from .job import Job

#: Seconds between seeing a rank's process gone and acting on it (its last messages land).
GRACE_S = 0.3
#: A process gone with no status read is a rank's end only once the rank has been silent
#: this long too (a live rank beats every 0.5 s): a pid of another pid namespace that
#: happened to name a process here never ends a live rank.
SILENT_S = 0.8
#: Exit reports and watched processes kept (the oldest forgotten first).
MAX_PIDS = 1024


@dataclass
class Ended:
    """A rank's process ended: ``code`` as multiprocessing's ``exitcode`` (negative: the
    signal that killed it; None: not visible here); ``by_launcher``: the launcher
    terminated it after another rank failed."""

    code: int | None
    by_launcher: bool = False
    seen_at: float = 0.0


def describe(code: int | None) -> str:
    """How the process ended, in words (the ``failed`` alarm's reason)."""
    if code is None:
        return (
            "its process ended without a word (no exception, no exit message: killed or "
            "crashed; only its launcher saw the exit status)"
        )
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"its process was killed by {name} (signal {-code})"
    return f"its process exited with code {code} without reporting an exception"


class ExitWatch:
    """Which ranks' processes have ended, and how (module docstring)."""

    def __init__(self) -> None:
        self.host = socket.gethostname()[:256]
        #: pid -> what the launcher (torch's join in this process) said of its exit.
        self._reported: OrderedDict[int, Ended] = OrderedDict()
        #: pid -> its start time in /proc (None: not readable; it is not watched).
        self._start: OrderedDict[int, str | None] = OrderedDict()
        #: pid -> when its end was first seen.
        self._ended: OrderedDict[int, Ended] = OrderedDict()
        self.errors = 0

    def reported(self, pid: int, code: int, by_launcher: bool, now: float) -> None:
        """torch's join reaped ``pid`` (any thread; the hub holds its lock)."""
        if pid not in self._reported:
            self._reported[pid] = Ended(code, by_launcher, now)
            _bound(self._reported)

    def watches(self, host: str, pid: int) -> bool:
        return pid > 0 and host == self.host and pid != os.getpid()

    def attached(self, identity: dict[str, object]) -> None:
        """A rank said hello (its process lives now): note which process its pid names
        here (a pid of another pid namespace naming nothing here is never watched)."""
        pid = identity.get("pid")
        if isinstance(pid, int) and self.watches(str(identity.get("host", "")), pid):
            fields = _stat(pid)
            self._start[pid] = fields[19] if fields is not None and len(fields) > 19 else None
            self._start.move_to_end(pid)
            self._ended.pop(pid, None)  # (a pid reused since: what was said of it is old)
            self._reported.pop(pid, None)
            _bound(self._start)

    def ended(self, pid: int, now: float) -> Ended | None:
        """The end of ``pid`` once ``GRACE_S`` has passed since it was seen, else None."""
        try:
            first = self._ended.get(pid)
            if first is None:
                first = self._look(pid, now)
                if first is None:
                    return None
                self._ended[pid] = first
                _bound(self._ended)
        except Exception:
            self.errors += 1
            return None
        if now - first.seen_at < GRACE_S:
            return None
        # torch's join may tell more during the grace (it stopped this rank itself)
        told = self._reported.get(pid)
        return first if told is None else Ended(told.code, told.by_launcher, first.seen_at)

    def check(self, job: Job, alarms: Alarms, now: float) -> bool:
        """End the job's ranks whose processes ended without saying so: ``failed`` with
        how (a signal, an exit code, or not visible), or ``exited`` (a clean exit whose
        ``bye`` never came, or stopped by the launcher after another rank failed).
        True when a rank changed."""
        changed = False
        for rank in job.ordered():
            ident = rank.identity
            pid = ident.get("pid")
            if rank.ended is not None or not isinstance(pid, int):
                continue
            if not self.watches(str(ident.get("host", "")), pid):
                continue
            end = self.ended(pid, now)
            if end is None or (end.code is None and now - rank.seen_at < SILENT_S):
                continue
            changed = True
            if end.by_launcher or end.code == 0:
                rank.ended = "exited"
                continue
            first = not any(r.ended == "failed" for r in job.ranks.values() if r is not rank)
            rank.ended = "failed"
            alarms.failed(rank, describe(end.code), secondary=not first)
        return changed

    def forget(self, pid: int) -> None:
        for kept in (self._reported, self._start, self._ended):
            kept.pop(pid, None)

    def _look(self, pid: int, now: float) -> Ended | None:
        told = self._reported.get(pid)
        if told is not None:
            return Ended(told.code, told.by_launcher, now)
        child = _child_status(pid)
        if child is not False:
            return None if child is True else Ended(child, False, now)
        return self._proc(pid, now)

    def _proc(self, pid: int, now: float) -> Ended | None:
        """Another process's end from /proc: gone, reused, or a zombie with its status."""
        fields = _stat(pid)
        known = self._start.get(pid, "")
        if fields is None:
            # gone: an end only if it was seen alive (/proc readable, same pid namespace)
            return Ended(None, False, now) if known else None
        start = fields[19] if len(fields) > 19 else None
        if known == "":
            self._start[pid] = start
            _bound(self._start)
            known = start
        if known is None:
            return None
        if start != known:
            return Ended(None, False, now)  # the pid now names another process
        if fields[0] == "Z":
            status = int(fields[49]) if len(fields) > 49 and fields[49].isdigit() else None
            return Ended(_decode(status), False, now)
        return None


def _child_status(pid: int) -> int | bool:
    """This process's child ``pid``: True while it runs, its exit code once it ended (not
    reaped: ``WNOWAIT``); False if it is not (or no longer) a child of ours."""
    waitid = getattr(os, "waitid", None)
    if waitid is None:
        return False
    try:
        got = waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (ChildProcessError, OSError):
        return False
    if got is None:
        return True
    if got.si_code == os.CLD_EXITED:
        return int(got.si_status)
    return -int(got.si_status)  # CLD_KILLED / CLD_DUMPED


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields from the state on (field 3), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    return text[text.rfind(")") + 1 :].split()


def _decode(status: int | None) -> int | None:
    """A waitpid status as an exit code (negative: the signal)."""
    if status is None:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return None


_V = TypeVar("_V")


def _bound(kept: OrderedDict[int, _V]) -> None:
    while len(kept) > MAX_PIDS:
        kept.popitem(last=False)
