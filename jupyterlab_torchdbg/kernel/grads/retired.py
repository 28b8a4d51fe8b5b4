"""Tracks whose optimizer is gone before their last rows were judged.

A training function that makes its own optimizer (``def train(): opt = AdamW(...)``)
drops it when it returns, often within a second of its last step: its track (held by the
optimizer's key) went with it, and the rows flushed since the last alarm check (up to a
second of them, or the whole of a short run) were never judged. A diverging run of 40
steps was then never alarmed. Here the track is kept, strongly, from the moment its
optimizer is collected until the monitor has judged its last rows once
(``GradMonitor._after_flush``). The weakref callback only appends (it may run in any
thread, at any allocation): no tensor is touched there.
"""

from __future__ import annotations

import weakref
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from .track import Track

#: At most this many gone tracks wait for their last check (a sweep of many short runs).
MAX_RETIRED = 64


class RetiredTracks:
    def __init__(self) -> None:
        self._tracks: deque[Track] = deque(maxlen=MAX_RETIRED)

    def watch(self, track: Track, optimizer: torch.optim.Optimizer) -> None:
        """Keep ``track`` for its last check once ``optimizer`` is collected."""
        tracks = self._tracks

        def gone(_ref: object) -> None:
            track.retire()  # keeps no parameter alive meanwhile (R24)
            tracks.append(track)

        track.opt_ref = weakref.ref(optimizer, gone)

    def take(self) -> list[Track]:
        """The tracks waiting for their last check (emptied)."""
        out: list[Track] = []
        while self._tracks:
            out.append(self._tracks.popleft())
        return out

    def __len__(self) -> int:
        return len(self._tracks)

    def clear(self) -> None:
        self._tracks.clear()
