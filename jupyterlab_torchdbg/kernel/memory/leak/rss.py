"""This process's resident set size, cheap enough for every step."""

from __future__ import annotations

import os


class RssReader:
    """This process's RSS from ``/proc/self/statm`` (one ``pread``; reopened after a fork)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid = 0
        try:
            self._page = os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            self._page = 4096

    def read(self) -> int | None:
        try:
            if self._fd is None or self._pid != os.getpid():
                self._fd, self._pid = os.open("/proc/self/statm", os.O_RDONLY), os.getpid()
            return int(os.pread(self._fd, 256, 0).split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None and self._pid == os.getpid():
            try:
                os.close(fd)
            except OSError:
                pass
