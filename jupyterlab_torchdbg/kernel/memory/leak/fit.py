"""The per-step memory fit: a least-squares slope over the run's recent steps.

A series is ``(step, bytes)`` points (one per step for the process RSS; one per allocator
sample for a CUDA device). ``fit`` gives the slope, its standard error and how the growth
is spread over the window; ``steady`` says whether it is a leak: a slope well clear of
its noise, enough growth in absolute and relative terms, and growth in at least three of
the window's four quarters, the last among them. A single jump (a warm-up allocating
once), a cache that stops growing and a list of floats are none of these.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ....protocol.messages import MemoryLeakCounter as Counter

#: The counter a series follows (the protocol's ``MemoryLeak.counter``).

MiB = 1 << 20
#: Steps (points) the fit looks back over.
WINDOW = 200
#: Points the fit needs before it says anything (a cache filling for a few dozen
#: steps is not a leak yet; the holder search then takes a few more steps).
MIN_POINTS = 60
#: The slope must be this many standard errors above zero.
MIN_SIGMAS = 4.0
#: Growth over the window (slope x steps) at least this many bytes...
MIN_GROWTH = 32 * MiB
#: ...and at least this share of what is used.
MIN_GROWTH_SHARE = 0.02
#: A quarter of the window "grows" when its own slope is at least this share of the fit's.
QUARTER_SHARE = 0.5


@dataclass(frozen=True)
class Fit:
    slope: float
    err: float
    points: int
    first: int
    last: int
    used: float
    #: How many of the window's four quarters grow (each at >= QUARTER_SHARE x slope),
    #: and whether the last one does.
    quarters: int
    last_quarter: bool

    @property
    def steps(self) -> int:
        return self.last - self.first

    @property
    def growth(self) -> float:
        return self.slope * self.steps


def _slope(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope and its standard error (inf when undefined)."""
    n = len(xs)
    if n < 3:
        return 0.0, math.inf
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return 0.0, math.inf
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    icept = my - slope * mx
    resid = sum((y - icept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return slope, math.sqrt(resid / (n - 2) / sxx)


def fit(points: Sequence[tuple[int, float]]) -> Fit | None:
    """The fit over ``points`` (oldest first), or None with too few."""
    n = len(points)
    if n < 8:
        return None
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    slope, err = _slope(xs, ys)
    growing = []
    for k in range(4):  # quarters sharing their end points: a jump counts in exactly one
        a, b = k * (n - 1) // 4, (k + 1) * (n - 1) // 4 + 1
        q, _ = _slope(xs[a:b], ys[a:b])
        growing.append(slope > 0 and q >= QUARTER_SHARE * slope)
    return Fit(
        slope=slope,
        err=err,
        points=n,
        first=int(xs[0]),
        last=int(xs[-1]),
        used=ys[-1],
        quarters=sum(growing),
        last_quarter=growing[-1],
    )


def steady(f: Fit | None, *, min_points: int = MIN_POINTS, min_growth: float = MIN_GROWTH) -> bool:
    """Steady growth with the step count (a leak), never a single jump or a plateau
    (``min_points``: fewer for a series sampled less often than every step)."""
    if f is None or f.points < min_points or f.steps < MIN_POINTS - 1 or f.slope <= 0:
        return False
    return (
        f.slope > MIN_SIGMAS * f.err
        and f.growth >= min_growth
        and f.growth >= MIN_GROWTH_SHARE * max(f.used, 0.0)
        and f.quarters >= 3
        and f.last_quarter
    )


class Series:
    """One counter's recent ``(step, bytes)`` points: an O(1) append per step."""

    def __init__(self, name: str, counter: Counter, device: str | None) -> None:
        self.name, self.counter, self.device = name, counter, device
        self.points: deque[tuple[int, float]] = deque(maxlen=WINDOW)

    def add(self, step: int, value: float) -> None:
        self.points.append((step, value))

    def fit(self) -> Fit | None:
        pts = list(self.points)
        if pts:
            last = pts[-1][0]
            pts = [p for p in pts if p[0] > last - WINDOW]
        return fit(pts)
