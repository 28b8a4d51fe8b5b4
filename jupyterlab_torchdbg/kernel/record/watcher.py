"""The watcher: a tiny process that sees how the kernel ended and writes it down.

A process cannot learn its own cause of death, and only its parent (jupyter-server's
kernel manager) can ``waitpid`` it. But between its death and the moment the manager
reaps it (the manager polls, about every 3 s) the dead kernel is a zombie whose
``/proc/<pid>/stat`` still holds its exit status (field 52, ``exit_code``, in
``waitpid`` form, readable by the same user). So at load the kernel starts this watcher
(``python -S``: the standard library only, no torch, a few MB), in its own session so
that a signal to the kernel's process group does not reach it. It opens a pidfd on the
kernel (Linux 5.3+), sleeps in ``poll()`` until the kernel exits, then at once reads the
exit status and the cgroup's out-of-memory kill count, and writes the end into the
kernel's row, unless the kernel wrote a clean shutdown itself. What it cannot read is
written as ``unknown``: never a guess. It then exits; on ``%unload_ext`` the kernel
stops it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Run by ``python -S -c``: argv = db, kernel id, kernel pid, oom file ('' if none), oom0.
SOURCE = r"""
import os, select, sqlite3, sys, time
db, kid, pid, oom_file, oom0 = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]

def oom_count():
    try:
        for line in open(oom_file):
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
    except Exception:
        return None
    return None

try:
    fd = os.pidfd_open(pid)
except Exception:
    sys.exit(0)
p = select.poll()
p.register(fd, select.POLLIN)
while True:
    try:
        if p.poll():
            break
    except InterruptedError:
        continue
code = None
try:
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        code = int(fields[-1])
except Exception:
    code = None
oom = oom_count()
kills = None
if oom is not None and oom0 != "":
    kills = max(0, oom - int(oom0))
if code is None:
    kind, value = "unknown", None
    if kills:
        kind, value = "oom_kill", 9
elif code & 0x7F:
    kind, value = "signal", code & 0x7F
    if value == 9 and kills:
        kind = "oom_kill"
else:
    kind, value = "exit", (code >> 8) & 0xFF
for attempt in range(20):
    try:
        c = sqlite3.connect(db, timeout=5.0)
        c.execute(
            "UPDATE kernels SET end_kind=?, end_code=?, oom_kills=?"
            " WHERE id=? AND end_kind IS NULL",
            (kind, value, kills, kid),
        )
        c.commit()
        c.close()
        break
    except Exception:
        time.sleep(0.25)
"""


def cgroup_oom_file() -> str | None:
    """The file whose ``oom_kill`` line counts this process's cgroup's OOM kills."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # cgroup v2
            f = Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events"
        elif "memory" in controllers.split(","):  # cgroup v1
            f = Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control"
        else:
            continue
        if f.is_file():
            return str(f)
    return None


def oom_kills(path: str | None) -> int | None:
    if not path:
        return None
    try:
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def spawn(
    db: Path, kernel_id: str, oom_file: str | None, oom0: int | None
) -> subprocess.Popen[bytes] | None:
    """Start the watcher for this process; None where it cannot run (no pidfd)."""
    if not hasattr(os, "pidfd_open"):
        return None
    args = [str(db), kernel_id, str(os.getpid()), oom_file or "", "" if oom0 is None else str(oom0)]
    try:
        return subprocess.Popen(
            [sys.executable, "-S", "-c", SOURCE, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return None
