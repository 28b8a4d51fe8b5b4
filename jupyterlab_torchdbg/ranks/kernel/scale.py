"""Hundreds of ranks: what the kernel side asks and sends differently (issue #25).

Up to ``COMPACT_ABOVE`` ranks nothing changes. Above, each worker is asked (``config``)
for ``rows`` and heartbeats less often, so that all ranks together send about
``WORKER_RATE`` messages a second (the kernel verifies and reads each one), and for a
step row only every ``row_stride`` steps (the rows of all ranks are read one by one);
``ranks`` messages to the panels are spaced by ``flush_s`` (3 s at 256 ranks: the bytes
a second stay about those of 9 ranks) and carry each rank's newest point.
What needs acting on does not wait for the cadence (the agent's heartbeat of a stuck
rank, an exception, a ``bye``; the workers' answers to an all-rank action).
"""

from __future__ import annotations

from ..wire.messages import MAX_ROW_STRIDE

#: Seconds between two ``ranks`` messages with few ranks: at most 10 a second.
FLUSH_S = 0.1
#: ... and with 256 ranks or more.
MAX_FLUSH_S = 3.0
#: Above this many ranks a ``ranks`` message carries each rank's newest point only and
#: its identity only when new, messages are spaced out (``flush_s``) and workers report
#: less often (``cadence``).
COMPACT_ABOVE = 16
#: Worker messages a second the kernel asks for, all ranks together, above
#: ``COMPACT_ABOVE`` ranks (each rank's interval at most ``MAX_ROWS_S``).
WORKER_RATE = 40.0
MAX_ROWS_S = 8.0
#: Ranks per step row the kernel reads a second, all ranks together, above
#: ``COMPACT_ABOVE``: each worker is asked for a row only every ``row_stride`` steps
#: (a power of two, a multiple of the gradient-norm stride: the ranks' samples still
#: meet, and the heartbeat still carries every step).
ROWS_PER_S_RANKS = 32


def flush_s(ranks: int) -> float:
    """Seconds between two ``ranks`` messages: ``FLUSH_S`` (0.1 s) up to ``COMPACT_ABOVE``
    ranks, then growing with them (0.75 s at 64, 1.5 s at 128, ``MAX_FLUSH_S`` from 256
    on, when each rank reports every 6.4 s or less often): bytes to the panel and the
    kernel's time building them stay bounded."""
    if ranks <= COMPACT_ABOVE:
        return FLUSH_S
    return max(FLUSH_S, min(MAX_FLUSH_S, MAX_FLUSH_S * ranks / 256))


def coalesce_ms(ranks: int) -> int:
    """How long the endpoint lets workers' messages wait after reading some, to read the
    next ones together (endpoint.py): 50 ms up to ``COMPACT_ABOVE`` ranks, above that
    ``flush_s`` within [250 ms, 1 s] (750 ms at 64 ranks, 1 s from 86 on: they are shown
    every ``flush_s``, and each read of the kernel's thread pays a fixed cost of its own,
    issue #25). The endpoint reads at once again for a while after the kernel has sent
    the workers something (an all-rank action's answers)."""
    if ranks <= COMPACT_ABOVE:
        return 50
    return min(1000, max(250, round(flush_s(ranks) * 1000)))


def cadence(world: int) -> dict[str, float]:
    """What ``config`` asks of a worker in a world this large: its ``rows`` / heartbeat
    intervals so that all ranks together send about ``WORKER_RATE`` messages a second
    (none asked up to ``COMPACT_ABOVE``: the agent's own 0.1 s / 0.5 s)."""
    if world <= COMPACT_ABOVE:
        return {}
    rows = min(MAX_ROWS_S, max(0.1, world / WORKER_RATE))
    stride = 1
    while stride * ROWS_PER_S_RANKS < world and stride < MAX_ROW_STRIDE:
        stride *= 2
    return {"rows_s": rows, "heartbeat_s": max(0.5, rows), "row_stride": stride}
