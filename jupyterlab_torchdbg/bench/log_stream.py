"""``log()`` section: ``log(step, **values)`` with many series, paced and back to back.

The extension is loaded in-process against the testing fakes (one counting panel that
JSON-encodes each header, as the kernel's session does) and a cell is started, as a
training cell calling ``log()`` is (so a run is current). Three loops, in this order:

- **paced** (the headline): ``steps_per_s`` calls per second for ``seconds``, sleeping
  in between as a training loop's other work would (other processes then run, so each
  call finds cold caches, as in real training). The stream flushes on its own schedule
  inside ``log()``. Gives the cost of a call without its flushes (mean and median of
  individually timed calls) and the share of wall time the flushes took (moving the
  points to history, encoding, handing them to the comm): the "sending" cost of
  PERFORMANCE.md.
- **python call**: the same paced loop calling an empty ``def f(*steps, **values)``
  instead: what CPython alone costs to pass 400 keywords to any Python function (it
  rebuilds the ``**values`` dict), included in every figure above. The target compares
  ``log()`` with it in the same run (mean to mean and median to median), so the figure
  does not move with the machine.
- **dict**: the paced loop again, calling ``log(step, row)`` (the values as one dict: no
  keyword rebuild), for half as long.
- **tight**: ``tight_calls`` calls back to back (caches warm), flushes excluded likewise.

Also the points the panel received against those logged, any gap in ``series`` sequence
numbers, blocks it could not decode, and errors the extension counted.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

from typing_extensions import TypedDict

from .. import log, testing

PREFIX = "metric/"


class LogStreaming(TypedDict):
    """The log() section's figures (``run_log_streaming``)."""

    series: int
    steps_per_s_offered: float
    calls: int
    paced_calls: int
    seconds: float
    log_us_per_call: float
    log_us_per_call_median: float
    python_call_us_median: float
    python_call_us: float
    dict_calls: int
    log_dict_us_per_call: float
    log_dict_us_per_call_median: float
    tight_calls: int
    log_us_per_call_tight: float
    log_us_per_call_tight_median: float
    flushes: int
    flushes_per_s: float
    flush_interval_s: float
    send_slowdown: float
    kernel_us_per_flush: float
    send_fraction: float
    send_percent_of_wall: float
    points_recorded: int
    points_delivered: int
    sequence_gaps: int
    undecodable_blocks: int
    errors: dict[str, int]


class _Panel(testing.FakeComm):
    """A counting panel that also counts the logged series' points apart (the memory
    monitor streams its own series while a cell runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.logged_points = 0

    def send(
        self, data: Mapping[str, object], buffers: Sequence[bytes | memoryview] | None = None
    ) -> None:
        super().send(data, buffers)
        if data.get("method") == "series":
            for b in testing.message_blocks(data):
                names = self.names.get(testing.message_int(b["id"]))
                if names and names[0].startswith(PREFIX):
                    self.logged_points += testing.message_int(b["count"]) * len(names)


def _empty(*steps: object, **values: object) -> None:
    """What a call of ``log`` costs in CPython alone (same signature, no work)."""


def _paced(
    fn: Callable[..., object],
    rows: list[dict[str, float]],
    first: int,
    seconds: float,
    steps_per_s: float,
    spent: Callable[[], float],
    as_dict: bool = False,
) -> tuple[list[float], int, float]:
    """Call ``fn(step, **row)`` (``as_dict``: ``fn(step, row)``) ``steps_per_s`` times a
    second for ``seconds``; returns each call's time less ``spent()``'s growth meanwhile
    (its flushes), the next step, and the wall time."""
    calls: list[float] = []
    step = first
    t0 = time.perf_counter()
    while True:
        now = time.perf_counter()
        if now - t0 >= seconds:
            break
        ahead = t0 + (step - first) / steps_per_s - now
        if ahead > 0:
            time.sleep(min(ahead, 0.002))
            continue
        row = rows[step % len(rows)]
        before = spent()
        if as_dict:
            t = time.perf_counter()
            fn(step, row)
        else:
            t = time.perf_counter()
            fn(step, **row)
        calls.append(time.perf_counter() - t - (spent() - before))
        step += 1
    return calls, step, time.perf_counter() - t0


def _us(calls: list[float], median: bool = False) -> float:
    if not calls:
        return math.nan
    return (statistics.median(calls) if median else statistics.fmean(calls)) * 1e6


def run_log_streaming(
    seconds: float, series: int = 400, steps_per_s: float = 250.0, tight_calls: int = 2000
) -> LogStreaming:
    names = [f"{PREFIX}{i:03d}" for i in range(series)]
    rows = [{n: math.sin(k / 8 + i) + 1.5 for i, n in enumerate(names)} for k in range(64)]
    comm = _Panel()
    flush_s = 0.0
    flushes = 0
    with testing.loaded_extension(None, comm) as loaded:
        stream = loaded.ext.stream
        plain_flush = stream.flush

        def timed_flush(wait: bool = False) -> None:
            nonlocal flush_s, flushes
            t = time.perf_counter()
            plain_flush(wait)
            flush_s += time.perf_counter() - t
            flushes += 1

        stream.flush = timed_flush  # type: ignore[method-assign]
        loaded.shell.events.trigger("pre_run_cell", None)  # a training cell runs
        for step in range(50):  # warm-up (first block, first flush): not timed
            log(step, **rows[step % 64])
        timed_flush(True)
        flush_s, flushes = 0.0, 0
        points0 = comm.logged_points

        def spent() -> float:
            return flush_s

        paced, step, wall = _paced(log, rows, 50, seconds, steps_per_s, spent)
        t = time.perf_counter()
        timed_flush(True)  # the end of the cell: the rest goes out at once
        wall += time.perf_counter() - t
        paced_flush_s, paced_flushes = flush_s, flushes
        interval, slowdown = stream.flush_interval_s, stream.send_slowdown
        empty, _, _ = _paced(_empty, rows, 0, max(seconds / 4, 0.25), steps_per_s, spent)
        # the dict form, log(step, row): no keyword rebuild (its flushes are excluded
        # like the others'; the sending figures are the keyword loop's)
        as_dict, step, _ = _paced(
            log, rows, step, max(seconds / 2, 0.25), steps_per_s, spent, as_dict=True
        )
        tight: list[float] = []
        for k in range(tight_calls):
            before = flush_s
            t = time.perf_counter()
            log(step + k, **rows[k % 64])
            tight.append(time.perf_counter() - t - (flush_s - before))
        timed_flush(True)
        loaded.end_cell()
        errors = dict(loaded.ext.errors)
        stream.flush = plain_flush  # type: ignore[method-assign]
    n = len(paced)
    return {
        "series": series,
        "steps_per_s_offered": steps_per_s,
        "calls": n + len(as_dict) + len(tight),
        "paced_calls": n,
        "seconds": round(wall, 3),
        # paced (the headline): cold caches between calls, as in a training loop
        "log_us_per_call": _us(paced),
        "log_us_per_call_median": _us(paced, median=True),
        "python_call_us_median": _us(empty, median=True),
        "python_call_us": _us(empty),
        "dict_calls": len(as_dict),
        "log_dict_us_per_call": _us(as_dict),
        "log_dict_us_per_call_median": _us(as_dict, median=True),
        "tight_calls": len(tight),
        "log_us_per_call_tight": _us(tight),
        "log_us_per_call_tight_median": _us(tight, median=True),
        "flushes": paced_flushes,
        "flushes_per_s": paced_flushes / wall,
        "flush_interval_s": interval,
        "send_slowdown": slowdown,
        "kernel_us_per_flush": paced_flush_s / paced_flushes * 1e6 if paced_flushes else math.nan,
        "send_fraction": paced_flush_s / wall,
        "send_percent_of_wall": 100 * paced_flush_s / wall,
        "points_recorded": (n + len(as_dict) + len(tight)) * series,
        "points_delivered": comm.logged_points - points0,
        "sequence_gaps": comm.gaps,
        "undecodable_blocks": comm.unknown_blocks,
        "errors": errors,
    }


def summary(s: LogStreaming) -> str:
    """The section in one line (the README's wording)."""
    return (
        f"log() of {s['series']} values at {s['steps_per_s_offered']:.0f} calls/s: "
        f"{s['log_us_per_call_median']:.1f} µs per call paced (median; mean "
        f"{s['log_us_per_call']:.1f}; of which CPython's call with {s['series']} keywords "
        f"{s['python_call_us_median']:.1f}); {s['log_dict_us_per_call_median']:.1f} µs as "
        f"log(step, metrics) with a dict (median, paced); "
        f"{s['log_us_per_call_tight_median']:.1f} µs back "
        f"to back (median); {s['flushes_per_s']:.1f} flushes/s of "
        f"{s['kernel_us_per_flush']:.0f} µs, {s['send_percent_of_wall']:.3f}% of wall time "
        f"sending; {s['sequence_gaps']} sequence gaps."
    )
