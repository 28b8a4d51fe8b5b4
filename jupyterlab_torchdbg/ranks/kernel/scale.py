"""Hundreds of ranks: what the kernel side asks and sends differently (issue #25).

Up to ``COMPACT_ABOVE`` ranks nothing changes. Above, each worker is asked (``config``)
for ``rows`` and heartbeats less often, so that all ranks together send about
``WORKER_RATE`` messages a second (the kernel verifies and reads each one), and for a
step row only every ``row_stride`` steps (the rows of all ranks are read one by one);
``ranks``
messages to the panels are spaced by ``flush_s`` (2 s at 256 ranks: the bytes a second
stay about those of 13 ranks) and carry each rank's newest point and no per-rank layers.
"""

from __future__ import annotations

#: Seconds between two ``ranks`` messages with few ranks: at most 10 a second.
FLUSH_S = 0.1
#: Above this many ranks a ``ranks`` message leaves out the per-rank layers, messages
#: are spaced out (``flush_s``) and workers report less often (``cadence``).
COMPACT_ABOVE = 16
#: Worker messages a second the kernel asks for, all ranks together, above
#: ``COMPACT_ABOVE`` ranks (each rank's interval at most ``MAX_ROWS_S``).
WORKER_RATE = 50.0
MAX_ROWS_S = 5.0
#: Ranks per step row the kernel reads a second, all ranks together, above
#: ``COMPACT_ABOVE``: each worker is asked for a row only every ``row_stride`` steps
#: (a power of two, a multiple of the gradient-norm stride: the ranks' samples still
#: meet, and the heartbeat still carries every step).
ROWS_PER_S_RANKS = 32
#: The largest ``row_stride`` asked (the wire's and the agent's bound).
MAX_ROW_STRIDE = 64


def flush_s(ranks: int) -> float:
    """Seconds between two ``ranks`` messages: ``FLUSH_S`` (0.1 s) up to ``COMPACT_ABOVE``
    ranks, then growing with them (1 s at 128, 2 s from 256 on): bytes to the panel and
    the kernel's time building them stay bounded."""
    if ranks <= COMPACT_ABOVE:
        return FLUSH_S
    return FLUSH_S * max(1.0, min(20.0, ranks / 12.8))


def coalesce_ms(ranks: int) -> int:
    """How long the endpoint lets workers' messages wait after reading some, to read the
    next ones together (endpoint.py): 50 ms up to ``COMPACT_ABOVE`` ranks, 250 ms above
    (their messages are shown every ``flush_s``, 0.5 s or more)."""
    return 50 if ranks <= COMPACT_ABOVE else 250


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
