"""Honest sampling (issue #13): the auto stride follows the read of the gradients alone.

A real training loop paced by ``time.sleep`` (a 25 ms step, as with a data loader or a
GPU-bound model) runs through the whole every-step warm-up with the real extension loaded.
The panel's comm is made slow on purpose, so the periodic work (flush, alarm checks,
status) costs far more than a read: billed to the read, as before, it drove the stride to
hundreds. Now the stride must be what the track's own reported read cost implies, the
periodic cost is reported apart, and it is paid by flushing less often.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from grads_support import session
from torch import nn

from jupyterlab_torchdbg.kernel import watches
from jupyterlab_torchdbg.kernel.grads.stride import (
    MAX_SLOWDOWN,
    WARMUP_STEPS,
    every,
    nice_at_least,
)

#: Every message to the panel takes this long (a slow comm): each periodic pass does.
SEND_S = 0.05
#: The loop's own pace, as in the issue's report.
STEP_SLEEP_S = 0.025


def test_sleep_paced_stride_follows_the_read_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    # 200 tensors: a read that matters at a 25 ms step (a stride above 1 on most machines)
    model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(100)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8, 16)
    with session({"model": model, "opt": opt}) as s:
        send = s.comm.send

        def slow_send(data: dict[str, Any], buffers: Any = None) -> None:
            time.sleep(SEND_S)
            send(data, buffers)

        monkeypatch.setattr(s.comm, "send", slow_send)

        def steps(n: int) -> None:
            for _ in range(n):
                time.sleep(STEP_SLEEP_S)
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()

        steps(WARMUP_STEPS)  # sampled every step while the stride is tuned
        n0, t0 = len(s.comm.messages("series")), time.perf_counter()
        steps(60)  # the chosen stride
        series_per_s = (len(s.comm.messages("series")) - n0) / (time.perf_counter() - t0)
        t = s.track()
        assert t["mode"] == "auto" and t["every_step"] is None  # past the warm-up
        assert t["step_time_s"] >= STEP_SLEEP_S
        # the stride is what the measured read cost implies (within 2x: hysteresis)
        implied = nice_at_least(t["read_cost_s"] / (t["budget"] * t["step_time_s"]))
        assert implied / 2 <= t["stride"] <= 2 * implied, t
        # the read never carries a send: periodic work is measured and reported apart
        assert t["periodic_cost_s"] >= 0.5 * SEND_S, t
        assert t["read_cost_s"] < 0.5 * SEND_S, t
        assert t["periodic_share"] is not None and t["param_cost_s"] is not None
        # ... and paid by flushing less often (10 flushes/s would take half the wall time)
        base = s.ext.stream.interval_s
        assert base < t["flush_interval_s"] <= MAX_SLOWDOWN * base
        assert series_per_s < 0.5 / base, series_per_s  # and the stream really does
        # the panel is told why, in words, and the status it got validated
        reason = t["stride_reason"]
        assert reason.startswith(every(t["stride"])) and "a read costs" in reason
        s.end_cell()
        sent = [tr for m in s.comm.messages("grads") for tr in m["tracks"]]
        assert sent[-1]["stride_reason"].startswith(every(sent[-1]["stride"]))
        assert s.ext.errors == {}


def test_the_status_says_why_every_step_or_fixed() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 4)

    def steps(n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()

    with session({"model": model, "opt": opt}) as s:
        steps(3)
        assert s.track()["stride_reason"] == f"every step: first {WARMUP_STEPS} steps of the run"
        s.comm.action("clip", {"max_norm": 1.0})
        steps(2)
        assert s.track()["stride_reason"].startswith("every step: clipping is on")
        s.comm.action("unclip")
        handle = watches.add_watch(model, opt, 5)
        try:
            steps(10)
            s.end_cell()
            t = s.track()
            assert t["stride"] == 5 and t["stride_reason"] == "fixed by watch(stride=5)"
            sent = s.comm.messages("grads")[-1]["tracks"][0]
            assert sent["stride_reason"] == "fixed by watch(stride=5)"
        finally:
            handle.remove()
