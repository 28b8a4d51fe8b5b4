"""How often to sample: the monitor times itself and picks a stride (PERFORMANCE.md).

The step hook runs at every optimizer step but only *samples* (reads the gradients) every
``stride``-th step. In ``auto`` mode the stride is the smallest "nice" number (1, 2, 5,
10, 20, ...) for which the measured cost of one sample, spread over ``stride`` steps,
stays within ``budget`` (1%) of the measured step time. ``fixed`` samples every N steps
(N=1 is "every step", on request); ``off`` never samples.

``auto`` also samples every step while it matters most: the first ``WARMUP_STEPS`` steps
(early blow-ups) and ``BOOST_STEPS`` steps after the alarms see the total norm climbing
(``boost``), so an explosion is seen step by step instead of between two samples.

Everything here is arithmetic on numbers handed in (no clock of its own), so the logic
is tested without timing anything.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

#: Default share of the step time the monitor may cost.
DEFAULT_BUDGET = 0.01
#: The stride never exceeds this (a sample at least every 1,000 steps).
MAX_STRIDE = 1000
#: EMA weight of a new measurement.
ALPHA = 0.2
#: Samples measured before the auto stride moves away from 1.
MIN_SAMPLES = 3
#: A gap between two steps longer than this is a pause — the cell ended, the user was
#: debugging — and does not count as step time.
PAUSE_S = 2.0
#: The step time is the median of this many recent step-to-step intervals: an occasional
#: long one (an evaluation pass, a checkpoint, a data-loader stall) does not move it.
INTERVALS = 15
#: Lower the stride only when the smaller one fits with this much room, so it does not
#: flap between two values when the ideal sits on a boundary.
HYSTERESIS = 0.7
#: In ``auto`` mode the first this many steps of a run are all sampled: a too-high
#: learning rate usually blows up early, and within a stride a run can go from healthy
#: to NaN without the explosion being seen. Over a run of thousands of steps this costs
#: a few steps' worth of time; the stride is tuned meanwhile and applies afterwards.
WARMUP_STEPS = 100
#: Steps sampled every time once the alarms see the total norm climbing (``boost``).
BOOST_STEPS = 200

MODES = ("auto", "fixed", "off")


def nice_at_least(need: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is >= ``need`` (capped)."""
    if not math.isfinite(need) or need > MAX_STRIDE:
        return MAX_STRIDE
    if need <= 1:
        return 1
    decade = 10 ** math.floor(math.log10(need))
    for m in (1, 2, 5, 10):
        if m * decade >= need - 1e-9:
            return min(MAX_STRIDE, int(m * decade))
    return MAX_STRIDE  # pragma: no cover - the loop always returns


def choose_stride(cost_s: float, step_s: float, budget: float, current: int = 1) -> int:
    """The stride that keeps ``cost_s / (stride * step_s) <= budget``.

    Raising the stride happens at once (the budget is a promise); lowering it waits until
    the smaller stride fits with room to spare (``HYSTERESIS``).
    """
    if step_s <= 0 or cost_s <= 0 or budget <= 0:
        return 1 if budget > 0 else MAX_STRIDE
    need = cost_s / (budget * step_s)
    best = nice_at_least(need)
    if best >= current:
        return best
    # Lower to the smallest stride that fits with room to spare, never above the current.
    return min(current, nice_at_least(need / HYSTERESIS))


@dataclass
class Sampler:
    """Per-optimizer sampling decision and overhead bookkeeping (training thread only)."""

    mode: str = "auto"
    fixed: int = 1
    budget: float = DEFAULT_BUDGET
    stride: int = 1
    cost_ema: float | None = None
    last_cost: float | None = None
    #: The last sample's own time (reading the grads), without carried flush costs.
    last_sample: float | None = None
    samples: int = 0
    _since: int = 0
    _last_t: float | None = None
    _carry: float = 0.0
    #: Steps left to sample every time in ``auto`` mode (warm-up, then ``boost``).
    _boost: int = WARMUP_STEPS
    #: Why it is boosting: "warmup" (the first steps) or "rising" (``boost``).
    boost_reason: str = "warmup"
    _intervals: deque[float] = field(default_factory=lambda: deque(maxlen=INTERVALS))

    @property
    def step_s(self) -> float | None:
        """Typical step time: the median of recent intervals (None before two steps)."""
        if not self._intervals:
            return None
        return sorted(self._intervals)[len(self._intervals) // 2]

    def set_mode(self, mode: str, fixed: int = 1) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.mode = mode
        self.fixed = max(1, min(int(fixed), MAX_STRIDE * 100))
        if mode == "fixed":
            self.stride = self.fixed
        elif mode == "auto":
            self._retune()
        self._since = 0

    @property
    def boosting(self) -> bool:
        """True while ``auto`` samples every step (warm-up, or the norm is climbing)."""
        return self.mode == "auto" and self._boost > 0

    @property
    def effective_stride(self) -> int:
        """The stride sampling actually follows now (1 while boosting)."""
        return 1 if self.boosting else self.stride

    def boost(self, steps: int = BOOST_STEPS) -> None:
        """Sample the next ``steps`` steps every time (``auto`` mode only)."""
        self._boost = max(self._boost, steps)
        self.boost_reason = "rising"

    def tick(self, now: float) -> bool:
        """Called at every step boundary; True when this step should be sampled."""
        last, self._last_t = self._last_t, now
        if last is not None and 0 <= now - last <= PAUSE_S:
            self._intervals.append(now - last)
        if self.mode == "off":
            return False
        if self.mode == "auto" and self._boost > 0:
            self._boost -= 1
            self._since = 0
            return True
        self._since += 1
        if self._since >= self.stride:
            self._since = 0
            return True
        return False

    def add_cost(self, seconds: float) -> None:
        """Time spent outside a sample (a flush, a plan rebuild): billed to the next one."""
        self._carry += max(0.0, seconds)

    def observe(self, seconds: float) -> None:
        """The measured cost of one sample (plus any carried cost); retunes the stride."""
        self.last_sample = max(0.0, seconds)
        cost = self.last_sample + self._carry
        self._carry = 0.0
        self.last_cost = cost
        ema = self.cost_ema
        if ema is not None:
            cost = min(cost, 4 * ema)  # one slow sample (a GC pause) must not spike it
        self.cost_ema = cost if ema is None else ema + ALPHA * (cost - ema)
        self.samples += 1
        self._retune()

    def _retune(self) -> None:
        if self.mode == "fixed":
            self.stride = self.fixed
        elif self.mode == "auto":
            step = self.step_s
            if self.samples < MIN_SAMPLES or self.cost_ema is None or step is None:
                return
            self.stride = choose_stride(self.cost_ema, step, self.budget, self.stride)

    @property
    def overhead(self) -> float | None:
        """Estimated share of step time the monitor costs at the current stride."""
        if self.mode == "off":
            return 0.0
        step = self.step_s
        if self.cost_ema is None or not step:
            return None
        return self.cost_ema / (self.effective_stride * step)
