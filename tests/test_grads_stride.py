"""The automatic stride keeps the read's cost within budget, and the periodic work within
its own (logic, not wall time)."""

from __future__ import annotations

import random

import pytest

from jupyterlab_torchdbg.kernel.grads.stride import (
    BOOST_COOLDOWN_STEPS,
    BOOST_STEPS,
    DEFAULT_BUDGET,
    MAX_SLOWDOWN,
    MAX_STRIDE,
    PARAM_INTERVAL_MAX_S,
    PARAM_INTERVAL_S,
    PERIODIC_BUDGET,
    WARMUP_STEPS,
    Periodic,
    Sampler,
    choose_stride,
    every,
    nice_at_least,
    stride_reason,
)


def test_nice_numbers() -> None:
    assert [nice_at_least(v) for v in (0.3, 1, 1.01, 2, 2.5, 5, 7, 10, 11, 99, 501)] == [
        1,
        1,
        2,
        2,
        5,
        5,
        10,
        10,
        20,
        100,
        1000,
    ]
    assert nice_at_least(1e9) == MAX_STRIDE
    assert nice_at_least(float("nan")) == MAX_STRIDE


def test_stride_bounds_overhead_for_any_cost_and_step_time() -> None:
    rng = random.Random(0)
    for _ in range(5000):
        step = 10 ** rng.uniform(-5, 1)  # 10 us .. 10 s
        cost = step * 10 ** rng.uniform(-4, 1)  # 0.01% .. 1000% of a step
        s = choose_stride(cost, step, DEFAULT_BUDGET)
        assert 1 <= s <= MAX_STRIDE
        if s < MAX_STRIDE:
            assert cost / (s * step) <= DEFAULT_BUDGET * (1 + 1e-9)
        # and it is the smallest nice stride that does so (sampling as often as allowed)
        smaller = [n for n in (1, 2, 5, 10, 20, 50, 100, 200, 500) if n < s]
        if smaller:
            assert cost / (smaller[-1] * step) > DEFAULT_BUDGET


def test_cheap_monitor_samples_every_step() -> None:
    assert choose_stride(cost_s=1e-6, step_s=1e-2, budget=0.01) == 1


def test_hysteresis_raises_at_once_lowers_with_room() -> None:
    # need = 4.9 at stride 10: 5 would fit only just, so it stays at 10
    assert choose_stride(4.9e-4, 0.01, 0.01, current=10) == 10
    # need = 3.4: fits 5 with room (3.4 <= 0.7 * 5)
    assert choose_stride(3.4e-4, 0.01, 0.01, current=10) == 5
    # need = 5.1 at stride 5: raised at once
    assert choose_stride(5.1e-4, 0.01, 0.01, current=5) == 10
    # never more than twice what the read implies: 1.5 implies 2; 5 is lowered to 4
    assert choose_stride(1.5e-4, 0.01, 0.01, current=5) == 4
    assert choose_stride(1.5e-4, 0.01, 0.01, current=4) == 4  # and stays (no flapping)
    for need in (1.1, 1.5, 1.9, 2.1, 3.3, 4.6, 7.7, 14.0, 33.0):
        for current in (1, 2, 4, 5, 10, 20, 50, 100):
            got = choose_stride(need * 1e-4, 0.01, 0.01, current=current)
            assert got <= 2 * nice_at_least(need), (need, current, got)


def run(sampler: Sampler, steps: int, step_s: float, cost_s: float, t0: float = 0.0) -> float:
    """Drive the sampler with a fake clock; returns the simulated overhead share."""
    t, spent = t0, 0.0
    for _ in range(steps):
        t += step_s
        if sampler.tick(t):
            sampler.observe(cost_s)
            spent += cost_s
            t += cost_s
    return spent / (t - t0)


def test_sampler_converges_to_the_budget() -> None:
    s = Sampler()
    # the monitor costs 20% of a 5 ms step: it must end up sampling every 20+ steps
    overhead = run(s, 2000, 5e-3, 1e-3)
    assert s.stride == 20
    assert s.overhead is not None and s.overhead <= DEFAULT_BUDGET * 1.05
    # steady state: after the first adaptations the realised share is within budget
    later = run(s, 2000, 5e-3, 1e-3, t0=100.0)
    assert later <= DEFAULT_BUDGET * 1.05
    assert overhead < 0.05  # and even counting the warm-up it stays small


def test_sampler_fixed_and_off() -> None:
    s = Sampler()
    s.set_mode("fixed", 1)
    assert sum(s.tick(i * 0.01) for i in range(50)) == 50
    s.set_mode("fixed", 7)
    assert sum(s.tick(1 + i * 0.01) for i in range(70)) == 10
    s.set_mode("off")
    assert sum(s.tick(2 + i * 0.01) for i in range(70)) == 0
    assert s.overhead == 0.0
    with pytest.raises(ValueError):
        s.set_mode("sometimes")


def test_pauses_do_not_count_as_step_time() -> None:
    s = Sampler()
    run(s, 100, 0.01, 1e-5)
    before = s.step_s
    assert before == pytest.approx(0.01, rel=0.01)
    s.tick(1000.0)  # the cell ended; the next cell starts much later
    s.tick(1000.01)
    assert s.step_s == pytest.approx(before, rel=0.01)


def test_occasional_long_steps_do_not_move_the_step_time() -> None:
    """An eval pass every few steps (or a benchmark's interleaving) is not the step time."""
    s = Sampler()
    t = 0.0
    for i in range(400):
        t += 0.5 if i % 4 == 0 else 0.01  # one long gap in every four intervals
        if s.tick(t):
            s.observe(1e-3)  # 10% of a 10 ms step
    assert s.step_s == pytest.approx(0.01, rel=0.01)
    assert s.stride == 10


def test_one_slow_sample_does_not_spike_the_stride() -> None:
    s = Sampler()
    run(s, 200, 0.01, 1.3e-4)  # 1.3% of a step -> stride 2
    assert s.stride == 2
    s.observe(0.5)  # a GC pause inside one sample
    assert s.stride <= 10  # clipped to 4x the running cost, not 0.5 s
    run(s, 500, 0.01, 1.3e-4, t0=50.0)
    assert s.stride == 2  # and it comes back


def test_periodic_cost_never_raises_the_stride() -> None:
    """Issue #13: flush / alarm / weight-norm work billed to the read made a read costing
    2% of a step look like 50% and drove the stride to hundreds. Only the read counts."""
    s = Sampler()
    run(s, WARMUP_STEPS + 100, 0.025, 5e-4)  # a read costing 2% of a 25 ms step
    assert s.stride == 2
    t, n = 100.0, 0
    for _ in range(500):
        t += 0.025
        if s.tick(t):
            s.add_cost(0.0125)  # periodic work worth half a step before every sample
            s.observe(5e-4)
            n += 1
    assert s.stride == 2 and s.cost_ema == pytest.approx(5e-4)
    assert s.overhead == pytest.approx(0.01)  # the read's share, at the stride
    assert n == 250 and s.periodic_s == pytest.approx(0.0125 * n)
    # that work is paid apart: weight norms are read less often (0.5% of 2.5 s = 12.5 ms)
    assert s.param_interval_s == pytest.approx(0.0125 / PERIODIC_BUDGET)


def test_weight_norm_reads_slow_down_only_when_dear() -> None:
    s = Sampler()
    assert s.param_interval_s == PARAM_INTERVAL_S  # before any is timed
    s.add_cost(1e-3)  # 0.1% of a second: once a second is within budget
    assert s.param_interval_s == PARAM_INTERVAL_S
    s = Sampler()
    s.add_cost(0.02)  # 20 ms: once every 4 s keeps it at 0.5% of wall time
    assert s.param_interval_s == pytest.approx(0.02 / PERIODIC_BUDGET)
    for _ in range(50):
        s.add_cost(1.0)  # a read of a second: capped, weight norms still show up
    assert s.param_interval_s == PARAM_INTERVAL_MAX_S


def drive_periodic(p: Periodic, seconds: float, pass_s: float, t0: float = 0.0) -> float:
    """Passes of ``pass_s`` each at the flush interval ``p`` asks for (base 0.1 s), as the
    monitor's hook does; returns the share of wall time they took."""
    t, spent = t0, 0.0
    slowdown = p.slowdown
    while t - t0 < seconds:
        t += 0.1 * slowdown
        slowdown = p.add(pass_s, t)
        t += pass_s
        spent += pass_s
    return spent / (t - t0)


def test_periodic_work_within_budget_keeps_the_flush_interval() -> None:
    p = Periodic()
    share = drive_periodic(p, 20.0, 2e-4)  # 0.2% of wall time at 10 flushes/s
    assert p.slowdown == 1.0 and share < PERIODIC_BUDGET
    assert p.share == pytest.approx(share, rel=0.05)
    assert p.total_s == pytest.approx(p.count * 2e-4) and p.cost_ema == pytest.approx(2e-4)


def test_dear_periodic_work_flushes_less_often_within_bounds() -> None:
    p = Periodic()
    drive_periodic(p, 5.0, 2e-3)  # 2% of wall time at 10 flushes/s
    assert 3.0 < p.slowdown < 5.0  # about 4x: 0.5% of wall time
    later = drive_periodic(p, 20.0, 2e-3, t0=10.0)
    assert later <= PERIODIC_BUDGET * 1.05 and p.share is not None
    # a pass dearer than the budget allows even at 1 s: capped (the panel stays live)
    drive_periodic(p, 20.0, 0.05, t0=40.0)
    assert p.slowdown == MAX_SLOWDOWN
    # and it comes back when the work gets cheap again
    drive_periodic(p, 30.0, 1e-4, t0=70.0)
    assert p.slowdown == 1.0


def test_a_pause_starts_a_new_window() -> None:
    """Time between two cells is not wall time the periodic work had to share."""
    p = Periodic()
    drive_periodic(p, 1.0, 2e-3)  # less than a window
    assert p.share is None
    drive_periodic(p, 3.0, 2e-3, t0=1000.0)  # much later: one window from here on
    assert p.share == pytest.approx(2e-3 / (0.1 + 2e-3), rel=0.1)


def test_stride_reasons() -> None:
    s = Sampler()
    assert stride_reason(s) == f"every step: first {WARMUP_STEPS} steps of the run"
    run(s, WARMUP_STEPS + 100, 0.025, 5e-3)  # 20% of a 25 ms step -> every 20th
    assert s.stride == 20
    assert stride_reason(s) == "every 20th step: a read costs 5 ms, a step 25 ms, budget 1%"
    assert stride_reason(s, clipping=True).startswith("every step: clipping is on")
    assert stride_reason(s, skipping=True).startswith("every step: skipping non-finite")
    s.boost()
    assert stride_reason(s) == "every step: the norm is climbing"
    s.set_mode("fixed", 5)
    assert stride_reason(s, from_watch=True) == "fixed by watch(stride=5)"
    assert stride_reason(s) == "every 5th step: fixed by the stride setting"
    s.set_mode("off")
    assert stride_reason(s).startswith("never")
    s = Sampler()
    run(s, WARMUP_STEPS + 2000, 0.1, 1.5)  # a read dearer than ten steps
    assert s.stride == MAX_STRIDE
    assert stride_reason(s) == (
        "every 1000th step (the most): a read costs 1.5 s, a step 100 ms, budget 1%"
    )
    s = Sampler()
    run(s, WARMUP_STEPS + 10, 3.0, 1e-3)  # steps further apart than a pause
    assert s.step_s is None and "no step time" in stride_reason(s)
    assert [every(n) for n in (1, 2, 3, 11, 21, 22, 112, 50)] == [
        "every step",
        "every 2nd step",
        "every 3rd step",
        "every 11th step",
        "every 21st step",
        "every 22nd step",
        "every 112th step",
        "every 50th step",
    ]


def ticks(sampler: Sampler, steps: int, step_s: float, cost_s: float, t0: float) -> list[bool]:
    out = []
    t = t0
    for _ in range(steps):
        t += step_s
        hit = sampler.tick(t)
        out.append(hit)
        if hit:
            sampler.observe(cost_s)
    return out


def test_auto_samples_every_step_during_the_warm_up_then_follows_the_stride() -> None:
    """An early blow-up is seen step by step; afterwards the budget applies."""
    s = Sampler()
    seen = ticks(s, WARMUP_STEPS + 200, 5e-3, 1e-3, 0.0)  # the monitor costs 20% of a step
    assert all(seen[:WARMUP_STEPS])
    assert s.stride == 20 and not s.boosting and s.effective_stride == 20
    assert sum(seen[WARMUP_STEPS:]) == 200 // 20
    # while warming up the panel is told the truth: stride 1, overhead at stride 1
    w = Sampler()
    ticks(w, 50, 5e-3, 1e-3, 0.0)
    assert w.boosting and w.effective_stride == 1
    assert w.overhead == pytest.approx(0.2, rel=0.05)


def test_boost_samples_every_step_again_then_returns_to_the_stride() -> None:
    s = Sampler()
    ticks(s, WARMUP_STEPS + 100, 5e-3, 1e-3, 0.0)
    assert s.stride == 20
    s.boost()
    assert s.boosting and s.effective_stride == 1
    seen = ticks(s, BOOST_STEPS + 100, 5e-3, 1e-3, 10.0)
    assert all(seen[:BOOST_STEPS]) and sum(seen[BOOST_STEPS:]) == 100 // 20
    assert not s.boosting


def test_boost_and_warm_up_leave_fixed_and_off_alone() -> None:
    s = Sampler()
    s.set_mode("fixed", 7)
    s.boost()
    assert not s.boosting
    assert sum(s.tick(i * 0.01) for i in range(70)) == 10
    s.set_mode("off")
    s.boost()
    assert sum(s.tick(1 + i * 0.01) for i in range(70)) == 0


def test_a_climb_boosts_once_then_waits_for_the_cooldown_issue_22() -> None:
    """A norm that keeps rising and falling back (a converged model's heavy-tailed jitter)
    must not keep the sampler at every step for ever: one boost, then at least
    BOOST_COOLDOWN_STEPS at the stride before the next."""
    s = Sampler()
    ticks(s, WARMUP_STEPS + 100, 5e-3, 1e-3, 0.0)
    assert s.boost() and s.boosting
    ticks(s, BOOST_STEPS, 5e-3, 1e-3, 10.0)
    assert not s.boosting
    assert not s.boost() and not s.boosting  # climbing again, within the cooldown
    seen = ticks(s, BOOST_COOLDOWN_STEPS, 5e-3, 1e-3, 20.0)
    assert sum(seen) == BOOST_COOLDOWN_STEPS // 20  # at the stride all along
    assert s.boost() and s.boosting  # after it: a climb is watched step by step again
