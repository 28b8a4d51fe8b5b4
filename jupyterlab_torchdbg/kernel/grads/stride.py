"""How often to sample: the monitor times itself and picks a stride (PERFORMANCE.md).

The step hook runs at every optimizer step but only *samples* (reads the gradients) every
``stride``-th step. In ``auto`` mode the stride is the smallest "nice" number (1, 2, 5,
10, 20, ...) for which the measured cost of one sample, spread over ``stride`` steps,
stays within ``budget`` (1%) of the measured step time. ``fixed`` samples every N steps
(N=1 is "every step", on request); ``off`` never samples.

``auto`` also samples every step while it matters most: the first ``WARMUP_STEPS`` steps
(early blow-ups) and ``BOOST_STEPS`` steps after the alarms see the total norm climbing
(``boost``), so an explosion is seen step by step instead of between two samples.

Only the read of the gradients counts against the stride's budget. The periodic work —
flush, alarm checks, status, the once-a-second weight-norm read — does not depend on the
stride: billing it to the read made a read costing 2% of a step look like 50% and drove
the stride to hundreds. It is measured apart (``Periodic``, ``Sampler.add_cost``) and paid
from its own budget (``PERIODIC_BUDGET`` of wall time) by doing it less often: the stream
flushes up to ``MAX_SLOWDOWN`` times less often, weight norms are read up to every
``PARAM_INTERVAL_MAX_S``. ``stride_reason`` says in one line why the stride is what it is.

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
#: After a climb's boost, steps before another climb may boost again: a norm that keeps
#: rising and falling back (heavy-tailed noise) costs at most BOOST_STEPS in every
#: BOOST_STEPS + this many, never every step for ever (issue #22).
BOOST_COOLDOWN_STEPS = 2000
#: Share of wall time the periodic work (flush + alarm checks + status; and, apart, the
#: weight-norm read) may take. Half the read's budget: together they stay near 1%.
PERIODIC_BUDGET = 0.005
#: The stream may flush up to this many times less often than its own interval (0.1 s ->
#: 1 s): later than that and the panel no longer looks live.
MAX_SLOWDOWN = 10.0
#: Periodic cost is measured over windows of at least this much wall time ...
WINDOW_S = 2.0
#: ... holding at least this many periodic passes (one slow pass is not a trend).
WINDOW_PASSES = 3
#: Weight norms are read at most this often, and less often (up to the max) when that
#: read would take more than ``PERIODIC_BUDGET`` of the time between two of them.
PARAM_INTERVAL_S = 1.0
PARAM_INTERVAL_MAX_S = 10.0

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
    the smaller stride fits with room to spare (``HYSTERESIS``), but never keeps a stride
    more than twice what the read implies (the ladder's 2 -> 5 rung would allow 2.5x).
    """
    if step_s <= 0 or cost_s <= 0 or budget <= 0:
        return 1 if budget > 0 else MAX_STRIDE
    need = cost_s / (budget * step_s)
    best = nice_at_least(need)
    if best >= current:
        return best
    # Lower to the smallest stride that fits with room to spare, never above the current.
    return min(current, max(best, min(nice_at_least(need / HYSTERESIS), 2 * best)))


@dataclass
class Sampler:
    """Per-optimizer sampling decision and overhead bookkeeping (training thread only)."""

    mode: str = "auto"
    fixed: int = 1
    budget: float = DEFAULT_BUDGET
    stride: int = 1
    #: Running cost of one read of the grads (what the stride is chosen from).
    cost_ema: float | None = None
    #: The last read's own time.
    last_sample: float | None = None
    samples: int = 0
    #: This track's periodic work (the weight-norm read): total, and running cost of one.
    periodic_s: float = 0.0
    param_cost_ema: float | None = None
    _since: int = 0
    _last_t: float | None = None
    #: Steps left to sample every time in ``auto`` mode (warm-up, then ``boost``).
    _boost: int = WARMUP_STEPS
    #: Why it is boosting: "warmup" (the first steps) or "rising" (``boost``).
    boost_reason: str = "warmup"
    #: Steps ticked, and the step from which a climb may boost again (``boost``).
    ticks: int = 0
    _boost_again_at: int = 0
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

    def boost(self, steps: int = BOOST_STEPS) -> bool:
        """Sample the next ``steps`` steps every time (``auto`` mode only), unless a boost
        ended less than ``BOOST_COOLDOWN_STEPS`` ago; True when it boosts."""
        if self.boosting and self.boost_reason == "rising":
            return True  # not extended: a climb gets one boost, then the cooldown
        if self.ticks < self._boost_again_at:
            return False
        self._boost = max(self._boost, steps)
        self.boost_reason = "rising"
        self._boost_again_at = self.ticks + steps + BOOST_COOLDOWN_STEPS
        return True

    def tick(self, now: float) -> bool:
        """Called at every step boundary; True when this step should be sampled."""
        last, self._last_t = self._last_t, now
        self.ticks += 1
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
        """Periodic work done for this track (the weight-norm read). Tallied apart and
        paid by reading less often (``param_interval_s``); never billed to the read, so
        it never moves the stride."""
        seconds = max(0.0, seconds)
        self.periodic_s += seconds
        ema = self.param_cost_ema
        self.param_cost_ema = (
            seconds if ema is None else ema + ALPHA * (min(seconds, 4 * ema) - ema)
        )

    @property
    def param_interval_s(self) -> float:
        """Seconds between two weight-norm reads: once a second, or as rarely as keeps
        that read within ``PERIODIC_BUDGET`` of the time between them (capped)."""
        ema = self.param_cost_ema
        need = PARAM_INTERVAL_S if ema is None else ema / PERIODIC_BUDGET
        return min(PARAM_INTERVAL_MAX_S, max(PARAM_INTERVAL_S, need))

    def observe(self, seconds: float) -> None:
        """The measured cost of one read of the grads; retunes the stride."""
        self.last_sample = cost = max(0.0, seconds)
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


@dataclass
class Periodic:
    """The monitor's periodic work (flush, alarm checks, status) and its own budget.

    Fed each pass's measured time; over windows of wall time (``WINDOW_S``, pauses over
    ``PAUSE_S`` start a new one) it computes the share of wall time that work takes and
    answers with a ``slowdown`` for the stream's flush interval: the flush rate is the one
    lever, and the work's cost is roughly proportional to it. Raised at once when over
    budget, lowered only with room to spare (``HYSTERESIS``); within 1..``MAX_SLOWDOWN``.
    """

    budget: float = PERIODIC_BUDGET
    slowdown: float = 1.0
    #: Every pass so far: total seconds and count (the bench's "µs per pass").
    total_s: float = 0.0
    count: int = 0
    #: Running cost of one pass, and the share of wall time in the last full window.
    cost_ema: float | None = None
    share: float | None = None
    _start: float | None = None
    _last: float = 0.0
    _spent: float = 0.0
    _passes: int = 0

    def add(self, seconds: float, now: float) -> float:
        """One pass began at ``now`` and took ``seconds``; returns the flush slowdown."""
        seconds = max(0.0, seconds)
        self.total_s += seconds
        self.count += 1
        ema = self.cost_ema
        self.cost_ema = seconds if ema is None else ema + ALPHA * (seconds - ema)
        if self._start is None or now - self._last > PAUSE_S:
            self._start, self._spent, self._passes = now, 0.0, 0  # a pause: a new window
        self._last = now
        self._spent += seconds
        self._passes += 1
        elapsed = now + seconds - self._start
        if elapsed >= WINDOW_S and self._passes >= WINDOW_PASSES:
            self.share = self._spent / elapsed
            self._retune(self.share)
            self._start, self._spent, self._passes = now + seconds, 0.0, 0
        return self.slowdown

    def _retune(self, share: float) -> None:
        # The slowdown at which this window's work would have taken exactly the budget.
        want = self.slowdown * share / self.budget
        if want > self.slowdown:
            self.slowdown = min(MAX_SLOWDOWN, want)
        elif want < self.slowdown * HYSTERESIS:
            self.slowdown = max(1.0, want / HYSTERESIS)


def stride_reason(
    s: Sampler, clipping: bool = False, from_watch: bool = False, skipping: bool = False
) -> str:
    """Why the track samples as it does, in one line for the panel (the track's header).

    ``clipping``: the clip action is on; ``from_watch``: a ``watch(stride=N)`` fixed it;
    ``skipping``: non-finite steps are skipped (that needs every step's norms)."""
    if s.mode == "off" and not skipping:
        return "never: sampling is off (set_stride)"
    if clipping:
        return "every step: clipping is on (it reads the norms anyway)"
    if skipping:
        return "every step: skipping non-finite steps needs every step's norms"
    if s.mode == "fixed":
        if from_watch:
            return f"fixed by watch(stride={s.fixed})"
        return f"{every(s.fixed)}: fixed by the stride setting"
    if s.boosting:
        if s.boost_reason == "warmup":
            return f"every step: first {WARMUP_STEPS} steps of the run"
        return "every step: the norm is climbing"
    step = s.step_s
    if step is None and s.samples >= MIN_SAMPLES:
        return f"every step: no step time (steps over {PAUSE_S:g} s apart count as pauses)"
    if s.cost_ema is None or step is None or s.samples < MIN_SAMPLES:
        return "every step until a read and a step are timed"
    most = " (the most)" if s.stride >= MAX_STRIDE else ""
    return (
        f"{every(s.stride)}{most}: a read costs {_duration(s.cost_ema)}, "
        f"a step {_duration(step)}, budget {s.budget * 100:g}%"
    )


def every(n: int) -> str:
    """``every step``, ``every 2nd step``, ``every 20th step``."""
    if n <= 1:
        return "every step"
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"every {n}{suffix} step"


def _duration(seconds: float) -> str:
    """``0.31 ms``, ``25 ms``, ``150 ms``, ``1.5 s``: two figures, no exponent."""
    v, unit = (seconds, "s") if seconds >= 1 else (seconds * 1e3, "ms")
    return f"{v:.0f} {unit}" if v >= 10 else f"{v:.2g} {unit}"
