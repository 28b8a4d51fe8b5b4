"""``log()`` section: a paced loop calling ``log(step, **values)`` with many series.

The extension is loaded in-process against the testing fakes (one counting panel that
JSON-encodes each header, as the kernel's session does). The loop calls ``log()`` at
``steps_per_s`` with ``series`` plain floats per call, as a training loop logging a wide
set of metrics would, and lets the stream flush on its own schedule inside ``log()``.

Reports the cost of a call without its flushes (microseconds per call: the mean, and
the median of individually timed calls) and the share of wall time the flushes took
(moving the points to history, encoding and handing them to the comm): the "sending"
cost of PERFORMANCE.md. Also the points the panel received against those logged, and
any gap in ``series`` sequence numbers.
"""

from __future__ import annotations

import math
import statistics
import time

from .. import log, testing


def run_log_streaming(
    seconds: float, series: int = 400, steps_per_s: float = 250.0
) -> dict[str, object]:
    names = [f"metric/{i:03d}" for i in range(series)]
    rows = [{n: math.sin(k / 8 + i) + 1.5 for i, n in enumerate(names)} for k in range(64)]
    comm = testing.FakeComm()
    with testing.loaded_extension(None, comm) as loaded:
        stream = loaded.ext.stream
        flush_s = 0.0
        flushes = 0
        plain_flush = stream.flush

        def timed_flush(wait: bool = False) -> None:
            nonlocal flush_s, flushes
            t = time.perf_counter()
            plain_flush(wait)
            flush_s += time.perf_counter() - t
            flushes += 1

        stream.flush = timed_flush  # type: ignore[method-assign]
        for step in range(50):  # warm-up (first block, first flush): not timed
            log(step, **rows[step % 64])
        timed_flush(True)
        flush_s, flushes = 0.0, 0
        points0 = comm.points
        calls: list[float] = []
        log_s = 0.0
        step = 50
        t0 = time.perf_counter()
        while True:
            now = time.perf_counter()
            if now - t0 >= seconds:
                break
            ahead = t0 + (step - 50) / steps_per_s - now
            if ahead > 0:
                time.sleep(min(ahead, 0.002))
                continue
            before = flush_s
            t = time.perf_counter()
            log(step, **rows[step % 64])
            dt = time.perf_counter() - t - (flush_s - before)
            log_s += dt
            calls.append(dt)
            step += 1
        timed_flush(True)  # the end of the cell: the rest goes out at once
        wall = time.perf_counter() - t0
        stream.flush = plain_flush  # type: ignore[method-assign]
    n = len(calls)
    return {
        "series": series,
        "steps_per_s_offered": steps_per_s,
        "calls": n,
        "seconds": round(wall, 3),
        "log_us_per_call": log_s / n * 1e6 if n else math.nan,
        "log_us_per_call_median": statistics.median(calls) * 1e6 if n else math.nan,
        "flushes": flushes,
        "kernel_us_per_flush": flush_s / flushes * 1e6 if flushes else math.nan,
        "send_fraction": flush_s / wall,
        "points_recorded": n * series,
        "points_delivered": comm.points - points0,
        "sequence_gaps": comm.gaps,
        "undecodable_blocks": comm.unknown_blocks,
    }
