"""The memory poller: a daemon thread reading NVML and /proc at most twice a second.

It calls the monitor's ``poll_once``, which never touches torch, tensors or CUDA (R36),
and it stops on unload (R01).
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Poller:
    """A daemon thread calling ``fn`` every ``interval`` seconds until ``stop``."""

    def __init__(self, fn: Callable[[], None], interval: float, on_error: Callable[[], None]):
        self._fn = fn
        self._interval = interval
        self._on_error = on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="torchdbg-memory", daemon=True)

    def start(self) -> Callable[[], None]:
        self._thread.start()
        return self.stop

    def _run(self) -> None:
        # The first poll right away: the cards have NVML numbers before the first cell.
        while not self._stop.is_set():
            try:
                self._fn()
            except Exception:
                self._on_error()
            if self._stop.wait(self._interval):
                break

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
