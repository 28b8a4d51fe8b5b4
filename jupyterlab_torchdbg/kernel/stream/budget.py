"""The stream's sending budget: flush less often when flushing costs too much.

A flush's cost is mostly fixed per message (the comm's send, the header's JSON, the
bookkeeping; the binary buffers cost little), so the share of wall time spent sending is
about ``cost / interval``. The stream keeps a running mean of what its sending flushes
cost (on its own clock, the comm's send included) and stretches the flush interval until
that share is within ``limits.SEND_BUDGET`` (PERFORMANCE.md: <= 0.1%), never by more
than ``limits.MAX_SEND_SLOWDOWN`` (the panel stays live). Fewer, larger messages: every
point still goes out, in order.
"""

from __future__ import annotations

from . import limits


def mean_cost(mean: float | None, seconds: float) -> float:
    """The running mean of a flush's cost after one more took ``seconds`` (an outlier,
    such as a preempted flush, counts as at most 4 means)."""
    if mean is None:
        return seconds
    return mean + limits.SEND_COST_ALPHA * (min(seconds, 4 * mean) - mean)


def slowdown(cost: float, interval_s: float) -> float:
    """How many intervals apart flushes of ``cost`` seconds must be to stay within the
    budget: within 1..``MAX_SEND_SLOWDOWN``."""
    share = limits.SEND_BUDGET * interval_s
    want = cost / share if share > 0 else 1.0
    return min(limits.MAX_SEND_SLOWDOWN, max(1.0, want))
