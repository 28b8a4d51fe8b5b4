"""The fast path of a wide ``log()`` call: many plain numbers recorded as one row.

``log(step, **values)`` with ``ROW_MIN_NAMES`` or more names whose values are all plain
``float``/``int`` records them as one row of a block (``Stream.block``, one per set of
names and run, like a gradient track's): one row packed as native float32 (``struct``,
the wire's y type) per call instead of a point per name; at the flush the block's rows
are joined and sent as they are (``stream.packed``: no torch, no conversion). A call of
400 values then costs tens of microseconds instead of about a millisecond, and the flush
tens of microseconds whatever the width.

Per call, only what must be read is read: one pass over the value types (counting exact
floats, C-level), the names compared item by item with the last layout's (identity
first, no hashing of a 400-name tuple), and the block kept on the layout while the
stream's block table is unchanged (``Stream.blocks_gen``).

Names containing "loss" stay scalar series (the divergence alarm and the non-finite
diagnosis read the loss from those): they are split off the row and recorded one by one.
Anything else (a tensor, a numpy value, ``None``) takes ``log()``'s general path, with
its conversions and warnings.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable
from operator import countOf

from .stream import BlockSeries, Stream

#: A call with fewer names records them one by one (nothing to gain from a row).
ROW_MIN_NAMES = 16
#: Sets of names remembered (a loop calling log() with ever new names stays bounded).
MAX_LAYOUTS = 64

_PLAIN = frozenset((float, int))
#: Integer steps up to this size are exact floats.
_EXACT = 2**53


class _Layout:
    """How one set of names (in call order) is recorded: which go in the row, which not,
    and the block the row goes to (valid while ``stream``'s ``blocks_gen`` is ``gen``)."""

    __slots__ = (
        "block",
        "gen",
        "names",
        "pack",
        "row_names",
        "scalar_names",
        "stream",
        "take_row",
        "take_scalars",
    )

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        row = [i for i, n in enumerate(names) if "loss" not in n.lower()]
        rest = [i for i, n in enumerate(names) if "loss" in n.lower()]
        self.row_names = tuple(names[i] for i in row)
        self.take_row: Callable[[tuple[object, ...]], tuple[float, ...]] | None = (
            None if len(row) == len(names) else _getter(row)
        )
        self.scalar_names = tuple(names[i] for i in rest)
        # native float32: the wire's y type (a finite value past its range packs as ±Inf,
        # as torch's float32 conversion makes it)
        self.pack = struct.Struct(f"{len(row)}f")
        self.take_scalars = _getter(rest) if rest else None
        self.block: BlockSeries | None = None
        self.stream: Stream | None = None
        self.gen = -1

    def block_of(self, stream: Stream) -> BlockSeries:
        """The block of the row names in ``stream``, kept on the layout while the
        stream's block table stays as it is (``log_row`` checks that inline)."""
        gen = stream.blocks_gen
        block = stream.block(self.row_names, per_run=True)
        self.block, self.stream, self.gen = block, stream, gen
        return block


def _getter(idx: list[int]) -> Callable[[tuple[object, ...]], tuple[float, ...]]:
    """Picks values by index (``log_row`` calls it once they are checked plain numbers)."""
    if len(idx) == 1:
        one = operator.itemgetter(idx[0])
        return lambda t: (one(t),)
    return operator.itemgetter(*idx)


_layouts: dict[tuple[str, ...], _Layout | None] = {}
#: The layout of the last wide call (checked first: a loop logs the same names each step).
_last: _Layout | None = None


def _layout(names: tuple[str, ...]) -> _Layout | None:
    global _last
    if names in _layouts:
        lay = _layouts[names]
    elif operator.countOf(map(type, names), str) != len(names):
        return None  # a dict's key that is not a str: the general path names it (scalars)
    else:
        lay = _Layout(names)
        if len(lay.row_names) < ROW_MIN_NAMES:
            lay = None
        if len(_layouts) >= MAX_LAYOUTS:
            _layouts.clear()
        _layouts[names] = lay
    if lay is not None:
        _last = lay
    return lay


def log_row(stream: Stream, steps: tuple[object, ...], values: dict[str, object]) -> bool:
    """Record a wide call's plain numbers as one row and flush when due; False: nothing
    was recorded, take the general path (also for a step that is not a plain int or
    finite float: the general path warns about it).

    Only the row's names go into the block; the names split off are recorded through
    ``Stream.record`` (returned True means every value was recorded).
    """
    n = len(values)
    if n < ROW_MIN_NAMES:
        return False
    if steps:
        step = steps[0]
        if len(steps) > 1:
            return False
        if type(step) is int and -_EXACT <= step <= _EXACT:
            x: float | None = float(step)
        elif type(step) is float and step - step == 0.0:  # finite
            x = step
        else:
            return False
    else:
        x = None
    vals = tuple(values.values())
    # Exact floats counted in C (no set built); ints too take a second look.
    if countOf(map(type, vals), float) != n and not set(map(type, vals)) <= _PLAIN:
        return False
    keys = tuple(values)
    lay = _last
    if lay is None or lay.names != keys:  # item by item, identity first: no hashing
        lay = _layout(keys)
        if lay is None:
            return False
    row = vals if lay.take_row is None else lay.take_row(vals)
    if not stream.running and stream.on_no_run is not None:
        stream.on_no_run()
    block = lay.block
    if block is None or lay.stream is not stream or lay.gen != stream.blocks_gen:
        try:
            block = lay.block_of(stream)
        except ValueError:  # more names than a block holds: the general path bounds them
            return False
    last = block.last_x
    if x is None:
        x = 1.0 if last is None else float(int(last) + 1)
    elif last is not None and x < last and stream.on_step_back is not None:
        stream.on_step_back()  # the step went back: a new run, a new block
        block = lay.block_of(stream)
    try:
        block.record_packed(lay.pack, row, x)
    except OverflowError:  # an int too large for a float: the general path makes it ±Inf
        return False
    stream.has_pending = True  # after the row is queued (see record_packed)
    stream.logged += 1
    if lay.take_scalars is not None:
        for name, v in zip(lay.scalar_names, lay.take_scalars(vals), strict=True):
            stream.record(name, float(v), x)
    if stream.due():
        stream.flush()
    return True
