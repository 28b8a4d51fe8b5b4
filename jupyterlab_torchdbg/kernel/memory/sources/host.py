"""``HostSource``: this process's resident set size (the host side of memory)."""

from __future__ import annotations

import os

from .reading import DeviceReading, Reading


class HostSource:
    """This process's resident set size (device index 0 = the host)."""

    kind = "host"

    def __init__(self) -> None:
        try:
            self._page = os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            self._page = 4096

    def read(self) -> Reading:
        rss, why = self.rss()
        d = DeviceReading(0, {"rss": rss}, {"rss": why} if why else {})
        return Reading(True, None, [d])

    def rss(self) -> tuple[int | None, str | None]:
        try:
            with open("/proc/self/statm", "rb") as f:
                return int(f.read().split()[1]) * self._page, None
        except (OSError, ValueError, IndexError):
            pass
        try:
            import psutil

            return int(psutil.Process().memory_info().rss), None
        except Exception:
            return None, "resident memory unavailable on this platform (install psutil)"
