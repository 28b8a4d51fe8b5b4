"""The series and blocks of earlier runs (runs.py): kept, still flushed, then forgotten.

When a run starts, the stream moves the previous run's ``log()`` series and per-run
blocks (gradient tracks) here: their pending points still go out at the next flush, and
every snapshot carries them with their ``run``, so a reloaded panel can draw them faded.
Only the last ``limits.KEEP_RUNS`` runs are kept (the current one included). Series
recorded outside any run count as the run before the one that retired them. Only the
stream touches this, under its store lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from typing import TYPE_CHECKING

from . import limits
from .series import BlockSeries, Series

if TYPE_CHECKING:
    from ...protocol import messages as m


def with_run(header: m.Block, s: Series | BlockSeries) -> m.Block:
    """A block header with its ``run`` (when it has one)."""
    if s.run is not None:
        header["run"] = s.run
    return header


class Retired:
    def __init__(self) -> None:
        self._series: list[tuple[int, Series]] = []
        self._blocks: list[tuple[int, BlockSeries]] = []

    def retire(self, new_run: int, items: Iterable[Series | BlockSeries]) -> None:
        for s in items:
            gen = s.run if s.run is not None else new_run - 1
            if isinstance(s, Series):
                self._series.append((gen, s))
            else:
                self._blocks.append((gen, s))

    def prune(self, new_run: int) -> None:
        """Keep the runs after ``new_run - KEEP_RUNS`` (``new_run`` is the next one)."""
        floor = new_run - limits.KEEP_RUNS
        self._series = [(g, s) for g, s in self._series if g > floor]
        self._blocks = [(g, b) for g, b in self._blocks if g > floor]

    def series(self, current: Iterable[Series]) -> Iterator[Series]:
        """The retired series (oldest first), then ``current``."""
        return chain((s for _, s in self._series), current)

    def blocks(self, current: Iterable[BlockSeries]) -> Iterator[BlockSeries]:
        return chain((b for _, b in self._blocks), current)

    def clear(self, wanted: set[str] | None) -> int:
        """Forget the retired series and blocks with any of these names (all: None)."""
        n = 0
        keep_s: list[tuple[int, Series]] = []
        for g, s in self._series:
            if wanted is None or s.name in wanted:
                n += 1
            else:
                keep_s.append((g, s))
        keep_b: list[tuple[int, BlockSeries]] = []
        for g, b in self._blocks:
            if wanted is None or wanted.intersection(b.names):
                n += b.width
            else:
                keep_b.append((g, b))
        self._series, self._blocks = keep_s, keep_b
        return n
