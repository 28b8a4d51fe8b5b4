"""The automatic stride keeps the monitor's cost within budget (logic, not wall time)."""

from __future__ import annotations

import random

import pytest

from jupyterlab_torchdbg.kernel.grads.stride import (
    BOOST_STEPS,
    DEFAULT_BUDGET,
    MAX_STRIDE,
    WARMUP_STEPS,
    Sampler,
    choose_stride,
    nice_at_least,
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


def test_carried_cost_is_billed() -> None:
    s = Sampler()
    s.add_cost(0.003)
    s.observe(0.001)
    assert s.last_cost == pytest.approx(0.004)


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
