"""``RecordedSource``: readings played back in order, for tests and demos without a GPU."""

from __future__ import annotations

from collections.abc import Sequence

from .reading import Reading


class RecordedSource:
    """Replays recorded readings in order, then keeps returning the last one.

    The CPU tests drive the monitor and the autopsy with it (a CUDA allocator or an NVML
    that is absent, NotSupported, MIG, ... without any GPU).
    """

    def __init__(self, kind: str, readings: Sequence[Reading]) -> None:
        if not readings:
            raise ValueError("a recording needs at least one reading")
        self.kind = kind
        self._readings = list(readings)
        self.calls = 0

    def read(self) -> Reading:
        r = self._readings[min(self.calls, len(self._readings) - 1)]
        self.calls += 1
        return r
