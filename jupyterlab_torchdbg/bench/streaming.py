"""Streaming section: the real ``Stream`` fed like a fast training loop.

400 series (a 400-layer model's norms) recorded as one block per step at a paced 1,000
steps/s, flushed on the stream's own schedule into a counting comm that JSON-encodes
each header. Measured in a long run's steady state: ``prefill`` steps are streamed first
(by default twice the history capacity, so the history is full and being thinned, as in
any run past 4,096 steps), then the measured panel joins through a snapshot, as a panel
opened during training does, and the timed part begins.

Reports delivered points/s, messages/s, bytes/s, kernel time per flush (recording
excluded), the share of wall time spent flushing and sending, any gap in ``series``
sequence numbers, and any block the panel could not have decoded (its names never
reached it). ``profile=True`` runs the flushes under cProfile and prints where
their time goes (``--profile-stream``).
"""

from __future__ import annotations

import cProfile
import itertools
import math
import pstats
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from typing_extensions import TypedDict

from ..kernel.stream import Stream, limits
from ..kernel.stream.wire import Buffers
from ..testing import FakeComm

if TYPE_CHECKING:
    from ..protocol import messages as m


class Streaming(TypedDict):
    """The stream's figures (``run_streaming``)."""

    series: int
    steps_per_s_offered: float
    steps_recorded: int
    seconds: float
    points_per_s: float
    messages_per_s: float
    messages: int
    min_message_gap_s: float
    bytes_per_s: float
    kernel_us_per_flush: float
    send_fraction: float
    sequence_gaps: int
    undecodable_blocks: int
    points_delivered: int
    points_recorded: int
    prefilled_steps: int
    flush_interval_s: float
    send_slowdown: float
    torch_threads: int


def run_streaming(
    seconds: float,
    series: int = 400,
    steps_per_s: float = 1000.0,
    profile: bool = False,
    prefill: int | None = None,
) -> Streaming:
    prefill = 2 * limits.HISTORY_CAPACITY if prefill is None else prefill
    panels = [FakeComm()]  # the comms the stream broadcasts to
    prof = cProfile.Profile() if profile else None

    def broadcast(header: Mapping[str, object], buffers: Buffers) -> None:
        for c in panels:
            c.send(header, buffers)

    stream = Stream(broadcast)
    block = stream.block([f"grad/bench/layer{i}" for i in range(series)])
    rows = torch.rand(64, series)  # recycled: the cost measured is the stream's
    for step in range(prefill):  # untimed: a long run up to now
        block.record(rows[step % 64], step)
        if step % 100 == 99:
            stream.flush()
    stream.flush()
    comm = FakeComm()

    def join(blocks: list[m.SnapshotBlock], buffers: Buffers, seq: int) -> None:
        comm.send({"method": "snapshot", "seq": seq, "blocks": blocks}, buffers)
        panels[:] = [comm]

    stream.send_snapshot(join)
    joined_bytes = comm.bytes
    # at least a few flush intervals (the sending budget may have stretched it)
    seconds = max(seconds, 3 * stream.flush_interval_s)
    flush_s, flushes, recorded = 0.0, 0, 0
    sent_at: list[float] = []  # when each flush that sent a series message began
    t0 = time.perf_counter()
    while True:
        now = time.perf_counter()
        if now - t0 >= seconds:
            break
        ahead = t0 + recorded / steps_per_s - now
        if ahead > 0:
            time.sleep(min(ahead, 0.002))
            continue
        block.record(rows[recorded % 64], prefill + recorded)
        recorded += 1
        if stream.due():
            if prof is not None:
                prof.enable()
            before = comm.series_messages
            tf = time.perf_counter()
            stream.flush()
            flush_s += time.perf_counter() - tf
            if prof is not None:
                prof.disable()
            flushes += 1
            if comm.series_messages > before:
                sent_at.append(tf)
    tf = time.perf_counter()
    stream.flush()  # what the end of a cell does: the rest goes out at once
    flush_s += time.perf_counter() - tf
    flushes += 1
    wall = time.perf_counter() - t0
    if prof is not None:
        print("streaming: where the flushes' time goes (cProfile)", file=sys.stderr)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(20)
    return {
        "series": series,
        "steps_per_s_offered": steps_per_s,
        "steps_recorded": recorded,
        "seconds": round(wall, 3),
        "points_per_s": comm.points / wall,
        # the steady rate: messages after the first, over the time from the first to the
        # last (a count over the whole loop would add one message at its start); the
        # cell-end flush aside
        "messages_per_s": _rate(sent_at),
        "messages": len(sent_at),
        # the rate limit (R08): no two messages closer than the flush interval
        "min_message_gap_s": min((b - a for a, b in itertools.pairwise(sent_at)), default=math.nan),
        "bytes_per_s": (comm.bytes - joined_bytes) / wall,
        "kernel_us_per_flush": flush_s / flushes * 1e6,
        "send_fraction": flush_s / wall,
        "sequence_gaps": comm.gaps,
        "undecodable_blocks": comm.unknown_blocks,
        "points_delivered": comm.points,
        "points_recorded": recorded * series,
        "prefilled_steps": prefill,
        "flush_interval_s": stream.flush_interval_s,
        "send_slowdown": stream.send_slowdown,
        "torch_threads": torch.get_num_threads(),
    }


def _rate(times: list[float]) -> float:
    """Events per second between the first and the last of ``times``."""
    if len(times) < 2 or times[-1] <= times[0]:
        return math.nan
    return (len(times) - 1) / (times[-1] - times[0])
