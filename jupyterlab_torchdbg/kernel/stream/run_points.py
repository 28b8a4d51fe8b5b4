"""Every kept point of one run, as plain ``(name, xs, ys)`` series (for an export).

A run's own series are the ``log()`` series and per-run blocks (gradient and parameter
norms, ``log()``'s wide rows) whose ``run`` is that run: their x is the step. Memory
series (``mem/...``) belong to no run and have Unix-time x: the points whose time falls
within the run's ``[since, until]`` are its. Other series of no run are left out.

What is read is the history (``history.py``): the points flushed so far (every point by
the end of the cell that logged it), decimated by two each time a series passed
``limits.HISTORY_CAPACITY`` points, and only for the runs the stream still keeps
(``limits.KEEP_RUNS``). The store lock is held only to copy the x values and take the
rows (chunks are never written once kept); the columns are split outside it.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

from .packed import PackedRows

if TYPE_CHECKING:
    import torch

    from .stream import Stream

Points = list[tuple[str, list[float], list[float]]]

#: The prefix of the memory series: Unix-time x, no run.
WALL_PREFIX = "mem/"


def run_points(stream: Stream, run: int, since: float, until: float) -> Points:
    """The series of run ``run`` (see the module docstring), empty ones left out."""
    scalars: list[tuple[str, list[float], list[float]]] = []
    blocks: list[tuple[tuple[str, ...], list[float], torch.Tensor | PackedRows]] = []
    with stream._lock:
        for s in stream.retired.series(stream._series.values()):
            if _picks(s.per_run, s.run, (s.name,), run):
                scalars.append((s.name, list(s.history.x), s.history.y.tolist()))
        for b in stream.retired.blocks(stream._blocks.values()):
            if _picks(b.per_run, b.run, b.names, run):
                blocks.append((b.names, list(b.history.x), b.history.rows()))
    out: Points = []
    for name, xs, ys in scalars:
        out.append((name, xs, ys))
    for names, xs, rows in blocks:
        out.extend(zip(names, [xs] * len(names), _columns(rows, len(names)), strict=True))
    out = [_within(p, since, until) if p[0].startswith(WALL_PREFIX) else p for p in out]
    return [p for p in out if p[1]]


def _picks(per_run: bool, of_run: int | None, names: tuple[str, ...], run: int) -> bool:
    if per_run:
        return of_run == run
    return all(n.startswith(WALL_PREFIX) for n in names)


def _columns(rows: torch.Tensor | PackedRows, width: int) -> list[list[float]]:
    """The ``rows x width`` float32 rows (``PackedRows`` or a tensor) as columns."""
    if isinstance(rows, PackedRows):
        values = array("f", rows.data)
        return [values[j::width].tolist() for j in range(width)]
    if not len(rows):
        return [[] for _ in range(width)]
    columns: list[list[float]] = rows.t().tolist()
    return columns


def _within(
    series: tuple[str, list[float], list[float]], since: float, until: float
) -> tuple[str, list[float], list[float]]:
    name, xs, ys = series
    keep = [i for i, x in enumerate(xs) if since <= x <= until]
    return name, [xs[i] for i in keep], [ys[i] for i in keep]
