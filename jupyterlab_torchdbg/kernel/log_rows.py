"""The fast path of a wide ``log()`` call: many plain numbers recorded as one row.

``log(step, **values)`` with ``ROW_MIN_NAMES`` or more names whose values are all plain
``float``/``int`` records them as one row of a block (``Stream.block``, one per set of
names and run, like a gradient track's): one packed row of float64 per call instead of a point
per name, and at the flush one host copy and one binary buffer for the whole block. A
call of 400 values then costs tens of microseconds instead of about a millisecond, and
the flush a few hundred microseconds whatever the width.

Names containing "loss" stay scalar series (the divergence alarm and the non-finite
diagnosis read the loss from those): they are split off the row and recorded one by one.
Anything else (a tensor, a numpy value, ``None``) takes ``log()``'s general path, with
its conversions and warnings.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable
from typing import Any

from .stream import Stream

#: A call with fewer names records them one by one (nothing to gain from a row).
ROW_MIN_NAMES = 16
#: Sets of names remembered (a loop calling log() with ever new names stays bounded).
MAX_LAYOUTS = 64

_PLAIN = frozenset((float, int))


class _Layout:
    """How one set of names (in call order) is recorded: which go in the row, which not."""

    __slots__ = ("pack", "row_names", "scalar_names", "take_row", "take_scalars")

    def __init__(self, names: tuple[str, ...]) -> None:
        row = [i for i, n in enumerate(names) if "loss" not in n.lower()]
        rest = [i for i, n in enumerate(names) if "loss" in n.lower()]
        self.row_names = tuple(names[i] for i in row)
        self.take_row: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = (
            None if len(row) == len(names) else _getter(row)
        )
        self.scalar_names = tuple(names[i] for i in rest)
        self.pack = struct.Struct(f"{len(row)}d").pack
        self.take_scalars = _getter(rest) if rest else None


def _getter(idx: list[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    if len(idx) == 1:
        one = operator.itemgetter(idx[0])
        return lambda t: (one(t),)
    return operator.itemgetter(*idx)


_layouts: dict[tuple[str, ...], _Layout | None] = {}


def _layout(names: tuple[str, ...]) -> _Layout | None:
    lay = _layouts.get(names, False)
    if lay is False:
        lay = _Layout(names)
        if len(lay.row_names) < ROW_MIN_NAMES:
            lay = None
        if len(_layouts) >= MAX_LAYOUTS:
            _layouts.clear()
        _layouts[names] = lay
    return lay  # type: ignore[return-value]


def log_row(stream: Stream, values: dict[str, object], x: float | None) -> bool:
    """Record a wide call's plain numbers as one row; False: take the general path.

    Only the row's names go into the block; the caller's ``Stream.record`` path is used
    for the names split off (returned True means every value was recorded).
    """
    if len(values) < ROW_MIN_NAMES:
        return False
    vals = tuple(values.values())
    if not set(map(type, vals)) <= _PLAIN:
        return False
    lay = _layout(tuple(values))
    if lay is None:
        return False
    row_vals = vals if lay.take_row is None else lay.take_row(vals)
    try:
        row = lay.pack(*row_vals)  # native float64s, as array("d") holds them
    except OverflowError:  # an int too large for a float: the general path makes it ±Inf
        return False
    if not stream.running and stream.on_no_run is not None:
        stream.on_no_run()
    try:
        block = stream.block(lay.row_names, per_run=True)
    except ValueError:  # more names than a block holds: the general path bounds them
        return False
    last = block.last_x
    if x is None:
        x = 1.0 if last is None else float(int(last) + 1)
    elif last is not None and x < last and stream.on_step_back is not None:
        stream.on_step_back()  # the step went back: a new run, a new block
        block = stream.block(lay.row_names, per_run=True)
    block.record(row, x)
    stream.logged += 1
    if lay.take_scalars is not None:
        for name, v in zip(lay.scalar_names, lay.take_scalars(vals), strict=True):
            stream.record(name, float(v), x)
    return True
