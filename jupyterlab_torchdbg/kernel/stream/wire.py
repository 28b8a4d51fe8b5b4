"""The stream's wire encoding: block headers and the bytes of their binary buffers.

A ``series`` or ``snapshot`` message carries one header per block (``id``, ``count``,
``names`` the first time the block goes out and in every snapshot, ``dropped`` when
pending points were lost) and two buffers per block: x as little-endian float64 and y
as little-endian float32, row-major (one row of every name per x). PROTOCOL.md is the
specification; this module is the only place that writes it.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from .packed import PackedRows

if TYPE_CHECKING:
    import torch

    from ...protocol import messages as m

Buffers = list[memoryview]


class _History(Protocol):
    def __len__(self) -> int: ...

    def x_bytes(self) -> memoryview: ...

    def y_bytes(self) -> memoryview: ...


class _Recorded(Protocol):
    """A ``Series`` or ``BlockSeries`` as a snapshot reads it (series.py imports this)."""

    @property
    def id(self) -> int: ...

    @property
    def run(self) -> int | None: ...

    @property
    def history(self) -> _History: ...


class _Scalar(_Recorded, Protocol):
    @property
    def name(self) -> str: ...


class _Block(_Recorded, Protocol):
    @property
    def names(self) -> tuple[str, ...]: ...


_LITTLE = sys.byteorder == "little"


def le_bytes(a: array, copy: bool = True) -> memoryview:  # type: ignore[type-arg]
    """The bytes of ``a`` in little-endian order, as the protocol specifies.

    ``copy=False`` for an array made for this message only: a view, no copy (a live
    history array must be copied: it grows while the message waits to be sent).
    """
    if sys.byteorder != "little":
        a = array(a.typecode, a)
        a.byteswap()
        return memoryview(a).cast("B")
    return memoryview(a).cast("B") if not copy else memoryview(a.tobytes())


def x_bytes(xs: Sequence[float]) -> memoryview:
    """x values made for one message: float64 little-endian, no second copy."""
    a = array("d", xs)
    return memoryview(a).cast("B") if _LITTLE else le_bytes(a, copy=False)


def scalar_bytes(ys: Sequence[float]) -> memoryview:
    """y values of a one-name block made for one message: float32 little-endian."""
    return le_bytes(array("f", ys), copy=False)


def tensor_bytes(t: torch.Tensor | PackedRows) -> memoryview:
    """Little-endian float32 bytes of a 2-D CPU float32 tensor (or ``PackedRows``),
    row-major.

    numpy (present beside torch in practice) gives a zero-copy view of a contiguous
    tensor; without it, a list round-trip. ``PackedRows`` are their own bytes.
    """
    if isinstance(t, PackedRows):
        return t.le_bytes()
    if sys.byteorder == "little":
        try:
            a = t.numpy()
            if not a.flags.c_contiguous:
                a = a.copy()
            return a.data.cast("B")
        except Exception:  # torch without numpy
            pass
    return le_bytes(array("f", t.contiguous().reshape(-1).tolist()))


def series_header(block_id: int, count: int, names: list[str] | None, dropped: int) -> m.Block:
    """One block of a ``series`` message: ``names`` only when not announced yet."""
    header: m.Block = {"id": block_id, "count": count}
    if names is not None:
        header["names"] = names
    if dropped:
        header["dropped"] = dropped
    return header


def snapshot_header(block_id: int, names: list[str], count: int) -> m.SnapshotBlock:
    """One block of a snapshot: every block carries its names (R05, R06)."""
    return {"id": block_id, "names": names, "count": count}


def snapshot_blocks(
    series: Iterable[_Scalar], blocks: Iterable[_Block]
) -> tuple[list[m.SnapshotBlock], Buffers]:
    """A snapshot's headers and buffers: every scalar series (a ``Series``), then every
    block (a ``BlockSeries``), each with its names, its ``run`` and its whole history."""
    headers: list[m.SnapshotBlock] = []
    buffers: Buffers = []
    for s in series:
        headers.append(_run(snapshot_header(s.id, [s.name], len(s.history)), s))
        buffers.append(s.history.x_bytes())
        buffers.append(s.history.y_bytes())
    for b in blocks:
        headers.append(_run(snapshot_header(b.id, list(b.names), len(b.history)), b))
        buffers.append(b.history.x_bytes())
        buffers.append(b.history.y_bytes())
    return headers, buffers


def _run(header: m.SnapshotBlock, s: _Recorded) -> m.SnapshotBlock:
    if s.run is not None:
        header["run"] = s.run
    return header
