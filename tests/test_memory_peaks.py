"""The peak of each sampling interval (memory/peaks.py) with a fake ``torch.cuda``: exact
when the allocator's all-time peak rose in the interval, else the sampled maximum, marked;
the user's peak counter is never reset."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
from grads_support import session

from jupyterlab_torchdbg.kernel.memory.peaks import IntervalPeaks
from jupyterlab_torchdbg.kernel.memory.sources import DeviceReading, Reading
from jupyterlab_torchdbg.kernel.memory.sources.torch_allocator import TorchAllocatorSource
from jupyterlab_torchdbg.testing import memory_monitor

GiB = 2**30


def reading(allocated: int, peak: int) -> Reading:
    return Reading(True, None, [DeviceReading(0, {"allocated": allocated, "peak": peak})])


def test_interval_peak_exact_when_the_all_time_peak_rose_else_sampled() -> None:
    p = IntervalPeaks()
    rows = []
    # (allocated, all-time peak) at each sample
    for a, pk in [(1, 1), (1, 3), (2, 3), (1, 3), (1, 4), (1, 1), (2, 2)]:
        r = reading(a * GiB, pk * GiB)
        p.update(r)
        v = r.devices[0].values
        rows.append((v["peak_interval"] / GiB, v["peak_exact"]))
    assert rows == [
        (1, 0.0),  # first sample: no interval yet
        (3, 1.0),  # a spike between two samples, caught by the rising all-time peak
        (2, 0.0),  # no new peak: the larger sampled value
        (2, 0.0),
        (4, 1.0),
        (1, 0.0),  # the user reset their counter: a lower bound, marked sampled
        (2, 1.0),  # after the reset, the counter rose in this interval: exact again
    ]


class FakeCuda:
    """``torch.cuda``'s host-side counters for one device, driven by the test."""

    def __init__(self) -> None:
        self.allocated = 0
        self.peak = 0
        self.resets = 0

    def alloc(self, n: int) -> None:
        self.allocated += n
        self.peak = max(self.peak, self.allocated)

    def stats(self, index: int) -> dict[str, Any]:
        def stat(cur: int, peak: int) -> dict[str, Any]:
            return {"all": {"current": cur, "peak": peak}}

        return {
            "allocated_bytes": stat(self.allocated, self.peak),
            "reserved_bytes": stat(8 * GiB, 8 * GiB),
            "active_bytes": stat(self.allocated, self.peak),
            "inactive_split_bytes": stat(0, 0),
        }


def test_monitor_series_catch_a_spike_between_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCuda()

    def never(*a: Any, **k: Any) -> None:
        fake.resets += 1
        raise AssertionError("the user's peak counter must not be reset")

    class Props:
        name, uuid, total_memory = "Fake GPU", "GPU-0000", 80 * GiB

    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props())
    monkeypatch.setattr(torch.cuda.memory, "memory_stats_as_nested_dict", fake.stats)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", never)
    monkeypatch.setattr(torch.cuda.memory, "reset_peak_memory_stats", never)
    model = nn.Linear(2, 2)
    with session({"model": model}) as s:
        m = memory_monitor()
        assert m is not None
        m.allocator = TorchAllocatorSource()
        s.shell.events.trigger("pre_run_cell", None)
        fake.alloc(GiB)
        m.sample_allocator()
        fake.alloc(5 * GiB)  # a temporary inside one step ...
        fake.alloc(-5 * GiB)  # ... freed before the next sample
        m.sample_allocator()
        fake.alloc(GiB)
        m.sample_allocator()
        s.end_cell()
        series = s.comm.series()
        st = m.status()
    # samples: the cell's start, three in the cell, the cell's end
    alloc = list(series["mem/cuda:0/allocated"][1] / GiB)
    peak = list(series["mem/cuda:0/peak_interval"][1] / GiB)
    exact = list(series["mem/cuda:0/peak_exact"][1])
    assert alloc == [0, 1, 1, 2, 2]  # the samples alone never see the spike
    assert peak == [0, 1, 6, 2, 2] and exact == [0, 1, 1, 0, 0]
    (card,) = st["devices"]  # type: ignore[misc]
    assert card["series"]["peak_interval"] == "mem/cuda:0/peak_interval"
    assert card["series"]["peak_exact"] == "mem/cuda:0/peak_exact"
    assert "exact" in card["peak_note"]
    assert fake.resets == 0
