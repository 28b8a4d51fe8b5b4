"""The peak of each sampling interval, without touching the user's peak counter.

The timeline samples ``allocated`` every ``SAMPLE_INTERVAL_S`` at most; a spike that is
allocated and freed between two samples (a temporary inside one step) would not show. The
allocator counts one peak per device (``allocated_bytes.all.peak``), reset only by
``torch.cuda.reset_peak_memory_stats``, which would also reset the user's
``max_memory_allocated``: never called here. torch offers no per-consumer peak and no
Python allocator-event callback (the C++ ``attachAllocatorTraceTracker`` is not bound;
``_record_memory_history`` is one process-wide setting the user's and the tool's recording
own, read back only through a full ``_snapshot()``). So, per device and interval:

- the all-time peak rose since the last sample: the interval's peak is that new peak,
  exactly (it was reached inside the interval);
- it did not: the interval's peak is unknown between the larger of the two sampled
  ``allocated`` values (shown) and the all-time peak; the row is marked sampled.

Series ``mem/cuda:N/peak_interval`` carries the value; ``mem/cuda:N/peak_exact`` 1 or 0
says which case each point is. The device card's ``peak_note`` says the same in words.
"""

from __future__ import annotations

from .sources import Reading

PEAK_NOTE = (
    "peak in each interval: exact when the all-time peak rose in it (the allocator's own "
    "counter); otherwise the larger of the two sampled values (marked sampled), since a "
    "spike below an earlier peak is not counted by the allocator between two samples"
)


class IntervalPeaks:
    """Adds ``peak_interval`` and ``peak_exact`` to each device's values of a reading."""

    def __init__(self) -> None:
        #: device index -> (all-time peak, allocated) at the previous sample
        self._last: dict[int, tuple[float, float]] = {}

    def update(self, r: Reading) -> None:
        if not r.available:
            return
        for d in r.devices:
            peak, alloc = d.values.get("peak"), d.values.get("allocated")
            if peak is None or alloc is None:
                continue
            peak, alloc = float(peak), float(alloc)
            last = self._last.get(d.index)
            if last is None:
                value, exact = alloc, 0.0  # no interval yet
            elif peak > last[0]:
                value, exact = peak, 1.0  # a new all-time peak: reached in this interval
            elif peak < last[0]:
                # the user reset the counter in this interval: its peak since the reset
                # is a lower bound
                value, exact = max(peak, last[1], alloc), 0.0
            else:
                value, exact = max(alloc, last[1]), 0.0
            d.values["peak_interval"] = value
            d.values["peak_exact"] = exact
            self._last[d.index] = (peak, alloc)
