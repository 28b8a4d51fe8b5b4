"""Streaming section: the real ``Stream`` fed like a fast training loop.

400 series (a 400-layer model's norms) recorded as one block per step at a paced 1,000
steps/s, flushed on the stream's own schedule into a counting comm that JSON-encodes
each header. Reports delivered points/s, messages/s, bytes/s, kernel time per flush
(recording excluded), the share of wall time spent flushing and sending, and any gap in
``series`` sequence numbers.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ..kernel.stream import Stream
from .harness import CountingComm


def run_streaming(seconds: float, series: int = 400, steps_per_s: float = 1000.0) -> dict[str, Any]:
    comm = CountingComm()
    stream = Stream(lambda header, buffers: comm.send(header, buffers))
    block = stream.block([f"grad/bench/layer{i}" for i in range(series)])
    rows = torch.rand(64, series)  # recycled: the cost measured is the stream's
    flush_s, flushes, recorded = 0.0, 0, 0
    t0 = time.perf_counter()
    while True:
        now = time.perf_counter()
        if now - t0 >= seconds:
            break
        ahead = t0 + recorded / steps_per_s - now
        if ahead > 0:
            time.sleep(min(ahead, 0.002))
            continue
        block.record(rows[recorded % 64], recorded)
        recorded += 1
        if stream.due():
            tf = time.perf_counter()
            stream.flush()
            flush_s += time.perf_counter() - tf
            flushes += 1
    loop_wall = time.perf_counter() - t0
    loop_messages = comm.series_messages
    tf = time.perf_counter()
    stream.flush()  # what the end of a cell does: the rest goes out at once
    flush_s += time.perf_counter() - tf
    flushes += 1
    wall = time.perf_counter() - t0
    return {
        "series": series,
        "steps_per_s_offered": steps_per_s,
        "steps_recorded": recorded,
        "seconds": round(wall, 3),
        "points_per_s": comm.points / wall,
        "messages_per_s": loop_messages / loop_wall,  # the steady rate, cell-end flush aside
        "bytes_per_s": comm.bytes / wall,
        "kernel_us_per_flush": flush_s / flushes * 1e6,
        "send_fraction": flush_s / wall,
        "sequence_gaps": comm.gaps,
        "points_delivered": comm.points,
        "points_recorded": recorded * series,
    }
