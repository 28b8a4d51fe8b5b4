"""``PackedRows``: a block's rows as native float32 bytes, with no torch involved.

``log()``'s wide calls (``log_rows``) pack each row into ``width`` native float32s
(``struct``) and queue it on the block (``BlockSeries.record_packed``). A flush joins
the rows into one ``PackedRows`` and sends its bytes as the block's y buffer: no tensor
is made, no host copy, no conversion (the wire's y is float32, row-major, exactly
this). History keeps it as it is: the bytes are never written, so a snapshot's bytes
stay valid while it waits to be sent.

The few places that need a tensor (a block's ``on_rows`` listener, a history mixing
packed chunks with tensor ones) call ``tensor()``.
"""

from __future__ import annotations

import sys
from array import array
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Bytes of one packed value (native float32).
ITEM = 4


class PackedRows:
    """``rows x width`` float32 values, row-major, in native byte order; immutable."""

    __slots__ = ("data", "rows", "width")

    def __init__(self, data: bytes | bytearray, width: int) -> None:
        if width <= 0 or len(data) % (width * ITEM):
            raise ValueError(f"{len(data)} bytes are not rows of {width} float32 values")
        self.data = data
        self.width = width
        self.rows = len(data) // (width * ITEM)

    @classmethod
    def join(cls, chunks: list[PackedRows], width: int) -> PackedRows:
        """The rows of ``chunks`` one after the other (one copy)."""
        if len(chunks) == 1:
            return chunks[0]
        return cls(b"".join(c.data for c in chunks), width)

    def __len__(self) -> int:
        return self.rows

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.width)

    def __getitem__(self, s: slice) -> PackedRows:
        """Rows ``s`` (a slice; negative steps are not supported)."""
        start, stop, step = s.indices(self.rows)
        if step < 1:
            raise ValueError("PackedRows slices rows forwards only")
        size = self.width * ITEM
        if step == 1:
            return PackedRows(self.data[start * size : max(start, stop) * size], self.width)
        view = memoryview(self.data)
        return PackedRows(
            b"".join(view[i * size : (i + 1) * size] for i in range(start, stop, step)),
            self.width,
        )

    def clone(self) -> PackedRows:
        """Itself: the bytes are never written (the interface of a history chunk)."""
        return self

    def le_bytes(self) -> memoryview:
        """The values as little-endian float32 bytes (the wire's y buffer), no copy on a
        little-endian machine."""
        if sys.byteorder == "little":
            return memoryview(self.data)
        a = array("f", self.data)
        a.byteswap()
        return memoryview(a).cast("B")

    def values(self) -> list[float]:
        """Every value, row-major (for tests and small reads)."""
        return array("f", self.data).tolist()

    def tensor(self) -> torch.Tensor:
        """A ``rows x width`` float32 CPU tensor of the values (a copy)."""
        import torch

        if not self.rows:
            return torch.empty((0, self.width), dtype=torch.float32)
        return torch.frombuffer(bytearray(self.data), dtype=torch.float32).view(
            self.rows, self.width
        )
