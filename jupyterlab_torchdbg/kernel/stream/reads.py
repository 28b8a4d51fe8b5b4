"""Read-side queries on the scalar series (the alarms and the status read them): the
stream calls these under its store lock."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable

from .series import Series


def tails(
    series: dict[str, Series], wanted: Callable[[str], bool], after: dict[str, float]
) -> list[tuple[str, list[float], list[float], bool]]:
    """Flushed points of the series ``wanted`` picks, newer than ``after[name]``:
    ``(name, xs, ys, went_back)`` per series with news; ``went_back`` when its last x is
    below ``after[name]`` (a new run: all its points are news)."""
    out: list[tuple[str, list[float], list[float], bool]] = []
    for name, s in series.items():
        hx = s.history.x
        if not wanted(name) or not len(hx):
            continue
        since = after.get(name, -math.inf)
        back = hx[-1] < since
        i = 0 if back else bisect_right(hx, since)
        if i < len(hx):
            out.append((name, list(hx[i:]), list(s.history.y[i:]), back))
    return out


def newest(series: dict[str, Series], wanted: Callable[[str], bool]) -> list[object]:
    """The newest value of each series ``wanted`` picks: the last one ``log()``ged and not
    yet flushed (possibly a device tensor), else the last flushed one."""
    return [
        s.pend_y[-1] if s.pend_y else s.last
        for name, s in series.items()
        if wanted(name) and (s.pend_y or s.last is not None)
    ]
