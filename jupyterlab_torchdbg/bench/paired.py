"""Interleaved paired rounds and their statistics.

A round runs a short block of consecutive steps of every variant, variants in a freshly
shuffled order, so slow drift of a shared machine (other processes, thermal state) hits
all variants alike; the ratio of each variant to ``none`` *within the same round* is the
sample. Consecutive steps (rather than one) give the monitor a real training cadence:
it times steps between its own hook calls and does some work per second (flushes), which
one-step rounds would spread over 7x the wall time. Medians are reported with a 95%
percentile-bootstrap interval over rounds.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence

import torch

from .variants import Runner

BOOTSTRAP = 2000


def run_rounds(
    runners: dict[str, Runner],
    rounds: int,
    warmup: int,
    seed: int = 0,
    window: int = 1,
    cuda: bool = False,
) -> dict[str, list[float]]:
    """Seconds per step, per variant, for each kept round (warm-up rounds dropped).

    Each round times ``window`` consecutive steps per variant and divides; on CUDA with
    CUDA events, so the GPU time is measured without a sync inside the window.
    """
    rng = random.Random(seed)
    names = list(runners)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + rounds):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            runner = runners[name]
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                for _ in range(window):
                    runner.step()
                end.record()
                torch.cuda.synchronize()
                dt = start.elapsed_time(end) / 1000.0 / window
            else:
                t0 = time.perf_counter()
                for _ in range(window):
                    runner.step()
                dt = (time.perf_counter() - t0) / window
            if r >= warmup:
                times[name].append(dt)
        if r == warmup - 1:
            for runner in runners.values():
                runner.own.clear()
    return times


def median_ci(
    samples: Sequence[float],
    rng: random.Random,
    stat: Callable[[Sequence[float]], float] = statistics.median,
) -> tuple[float, float, float]:
    """(median, 2.5th percentile, 97.5th percentile) of the bootstrap distribution."""
    if not samples:
        return (float("nan"),) * 3
    point = stat(samples)
    n = len(samples)
    boots = sorted(stat(rng.choices(samples, k=n)) for _ in range(BOOTSTRAP))
    return point, boots[int(0.025 * BOOTSTRAP)], boots[int(0.975 * BOOTSTRAP) - 1]


def paired_ratios(times: dict[str, list[float]], base: str = "none") -> dict[str, list[float]]:
    ref = times[base]
    return {
        name: [t / b for t, b in zip(ts, ref, strict=True) if b > 0]
        for name, ts in times.items()
        if name != base
    }


def ratio_of_medians_ci(
    a: Sequence[float], b: Sequence[float], rng: random.Random
) -> tuple[float, float, float]:
    """median(a) / median(b) with a bootstrap interval (a and b resampled independently)."""
    if not a or not b:
        return (float("nan"),) * 3
    point = statistics.median(a) / statistics.median(b)
    boots = sorted(
        statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
        for _ in range(BOOTSTRAP)
    )
    return point, boots[int(0.025 * BOOTSTRAP)], boots[int(0.975 * BOOTSTRAP) - 1]
