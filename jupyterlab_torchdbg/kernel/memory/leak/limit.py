"""``memory_limit``: what the process can use before it is killed, and where that comes from.

The kernel's cgroup first (v2 ``memory.max`` of the path in ``/proc/self/cgroup``, "max"
meaning none; v1 ``memory.limit_in_bytes`` when not the "no limit" huge value), capped by
what the host has left (``used`` + ``MemAvailable`` of ``/proc/meminfo``: a container's
meminfo is the host's, so the smaller wins). ``TORCHDBG_MEMORY_LIMIT`` (bytes, or with a
K/M/G suffix) stands in for the cgroup limit: tests inject a limit with it. For a CUDA
device the limit is its total memory (``device_limit``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ....protocol.messages import MemoryLeakLimitSource as LimitSource

#: Where a memory limit comes from (the protocol's ``limit_source``).

ENV = "TORCHDBG_MEMORY_LIMIT"
#: v1's "no limit" is a page-rounded 2**63-1; anything at or above this is no limit.
_HUGE = 1 << 60
_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _bytes(text: str | None) -> int | None:
    if not text:
        return None
    t = text.strip().lower().rstrip("b").rstrip("i")
    scale = 1
    if t and t[-1] in _SUFFIX:
        t, scale = t[:-1], _SUFFIX[t[-1]]
    try:
        v = int(float(t) * scale)
    except (ValueError, OverflowError):
        return None
    return v if 0 < v < _HUGE else None


def cgroup_limit(root: str | Path = "/") -> int | None:
    """The kernel's cgroup memory limit in bytes, None when there is none or it is
    unreadable (``root``: where ``proc`` and ``sys`` are, for tests)."""
    root = Path(root)
    lines = (_read(root / "proc/self/cgroup") or "").splitlines()
    found: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        rel = path.lstrip("/")
        if controllers == "":  # v2 unified hierarchy: the limit of any ancestor applies
            base = root / "sys/fs/cgroup"
            p = base / rel
            while True:
                v = _bytes(_read(p / "memory.max"))
                if v is not None:
                    found.append(v)
                if p == base or base not in p.parents:
                    break
                p = p.parent
        elif "memory" in controllers.split(","):
            for base in (root / "sys/fs/cgroup/memory", root / "sys/fs/cgroup/memory,cpu"):
                v = _bytes(_read(base / rel / "memory.limit_in_bytes"))
                if v is None:
                    v = _bytes(_read(base / "memory.limit_in_bytes"))
                if v is not None:
                    found.append(v)
                    break
    return min(found) if found else None


def mem_available(root: str | Path = "/") -> int | None:
    for line in (_read(Path(root) / "proc/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            fields = line.split()
            try:
                return int(fields[1]) * 1024
            except (IndexError, ValueError):
                return None
    return None


def memory_limit(used: int | None, root: str | Path = "/") -> tuple[int | None, LimitSource | None]:
    """``(limit, source)`` for this process's host memory: ``cgroup`` (or the injected
    ``TORCHDBG_MEMORY_LIMIT``), ``host`` (``used`` + MemAvailable) when that is lower or
    there is no cgroup limit, ``(None, None)`` when nothing is readable. Never raises."""
    try:
        limit = _bytes(os.environ.get(ENV)) or cgroup_limit(root)
        avail = mem_available(root)
        host = used + avail if used is not None and avail is not None else None
        if limit is not None and (host is None or limit <= host or os.environ.get(ENV)):
            return limit, "cgroup"
        if host is not None:
            return host, "host"
    except Exception:
        pass
    return None, None
