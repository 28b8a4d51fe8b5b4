"""Bounded history of a series or block: every x kept so far and its row of y values.

History keeps at most ``limits.HISTORY_CAPACITY`` rows: when full, every other row is
dropped and from then on only every ``keep_every``-th new row is kept, so a
million-step run stays bounded while still spanning the whole run. The decimation is
written once, in ``History.add``; the two subclasses only say how y rows are stored:

- ``ScalarHistory`` (a ``log()`` series, one name): a float32 ``array``;
- ``BlockHistory`` (many names recorded together): float32 ``rows x width`` chunks, one
  per flush (CPU tensors, or ``PackedRows`` for ``log()``'s packed rows: no torch), never
  written after they are added, so snapshot bytes stay valid while the snapshot waits to
  be sent.

Only the stream touches a history, under its store lock.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    import torch

from . import limits
from .packed import PackedRows
from .wire import le_bytes, tensor_bytes

#: What ``History.add`` takes: a scalar series' floats, or a block's ``rows x width``
#: float32 chunk (a CPU tensor or ``PackedRows``).
YRows = TypeVar("YRows")


class History(Generic[YRows]):
    """x values (float64) and their kept y rows; the storage of y is the subclass's."""

    def __init__(self) -> None:
        self.x = array("d")
        #: Only rows whose number is a multiple of this are kept (doubles when full).
        self.keep_every = 1
        #: Rows offered to ``add`` so far (kept or not).
        self.seen = 0

    def __len__(self) -> int:
        return len(self.x)

    def add(self, xs: list[float], ys: YRows) -> None:
        """Add the kept rows of ``ys`` (one per x) to the history, decimating when full.

        Row number ``seen + i`` is kept when it is a multiple of ``keep_every``. Kept rows
        are taken as slices (no per-row Python work); the history never holds more than
        HISTORY_CAPACITY rows.
        """
        total, i = len(xs), 0
        while i < total:
            k = self.keep_every
            first = i + (-self.seen) % k
            if first >= total:
                self.seen += total - i
                break
            room = limits.HISTORY_CAPACITY - len(self.x)
            stop = min(total, first + room * k)
            self._keep(ys, first, stop, k, whole=k == 1 and first == 0 and stop == total)
            self.x.extend(xs[first:stop:k])
            self.seen += stop - i
            i = stop
            if len(self.x) >= limits.HISTORY_CAPACITY:
                # Full: keep every other row, and from now on every other new one.
                self._halve()
                self.x = self.x[::2]
                self.keep_every *= 2

    def x_bytes(self) -> memoryview:
        """The x values for a snapshot (a copy: the array grows after it is taken)."""
        return le_bytes(self.x)

    def y_bytes(self) -> memoryview:
        """The y rows for a snapshot, float32 row-major; valid while it waits to be sent."""
        raise NotImplementedError

    def _keep(self, ys: YRows, first: int, stop: int, step: int, whole: bool) -> None:
        """Store ``ys[first:stop:step]``; ``whole`` when that is all of ``ys``."""
        raise NotImplementedError

    def _halve(self) -> None:
        """Keep every other stored row."""
        raise NotImplementedError


class ScalarHistory(History[list[float]]):
    """History of one name: y values in a float32 array."""

    def __init__(self) -> None:
        super().__init__()
        self.y = array("f")

    def _keep(self, ys: list[float], first: int, stop: int, step: int, whole: bool) -> None:
        self.y.extend(ys[first:stop:step])

    def _halve(self) -> None:
        self.y = self.y[::2]

    def y_bytes(self) -> memoryview:
        return le_bytes(self.y)


class BlockHistory(History["torch.Tensor | PackedRows"]):
    """History of a block: ``rows x width`` float32 chunks (CPU tensors or
    ``PackedRows``), one per flush."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        #: Never written after they are added (joined on snapshot and decimation).
        self._chunks: list[torch.Tensor | PackedRows] = []

    def _keep(
        self, ys: torch.Tensor | PackedRows, first: int, stop: int, step: int, whole: bool
    ) -> None:
        if whole:  # every row kept: a reference, no copy
            self._chunks.append(ys)
        else:  # only the kept rows, not a view holding all of ``ys``
            self._chunks.append(ys[first:stop:step].clone())

    def _halve(self) -> None:
        self._chunks = [self.rows()[::2].clone()]

    def rows(self) -> torch.Tensor | PackedRows:
        """The whole history as one ``rows x width`` chunk (joins the chunks once): a
        ``PackedRows`` when every chunk is one (or there are none), else a tensor."""
        chunks = self._chunks
        if not chunks:
            return PackedRows(b"", self.width)
        if all(type(c) is PackedRows for c in chunks):
            self._chunks = [PackedRows.join(chunks, self.width)]  # type: ignore[arg-type]
            return self._chunks[0]
        import torch

        if len(chunks) > 1:
            tensors = [c.tensor() if isinstance(c, PackedRows) else c for c in chunks]
            self._chunks = [torch.cat(tensors)]
        elif type(chunks[0]) is PackedRows:
            self._chunks = [chunks[0].tensor()]
        return self._chunks[0]

    def y_bytes(self) -> memoryview:
        """History as float32 bytes, row-major (the wire layout of a Block's y buffer).

        Chunks are never written after they are added, so the bytes stay valid while
        the snapshot waits to be sent."""
        return tensor_bytes(self.rows())
