"""Gradient alarms: non-finite, explosion, vanishing, and AMP skips/collapse (R31).

Detectors run at flush time on rows already on the host (``[total, layer_1..L, (scale)]``
per sampled step), vectorised with torch on CPU, so they add nothing to the step itself.
Each alarm fires once and re-arms only after the condition has cleared for a while, so a
run that stays broken gives one alert, not one per step. Alerts carry the step, the layer
and a one-line remedy (``Alert`` and ``AlertLog`` are in alerts.py).

Which layer is named:
- non-finite: at the first step with a non-finite gradient norm (a NaN/Inf value, or
  values whose norm overflows float32 — clipping would break there too), the layer closest
  to the loss (the last in model order). Backward runs from the loss towards the input,
  so a NaN/Inf produced in some layer poisons that layer and everything before it; the
  last poisoned layer is where it appeared. If the logged loss is non-finite, every layer
  is poisoned and the message says the loss is the source.
- explosion: the layer carrying the norm (its share of the squared total), and the one
  that grew most against its own level as a second fact (divergence.py).
- vanishing: the first layer (nearest the input) that stayed below the floor.

Explosion rules, from the second sampled step on (no blind warm-up): a total above
``EARLY_FACTOR`` (x100) times the first samples' level while the window fills, then above
``explode_factor`` (x10, raised by the run's own noise up to x100) times the running
median, or above ``explode_abs``. Exploded values do not enter the window, so a run that
diverges at step 2 is measured against its healthy first step (divergence.py has the
data behind x100, and the logged loss's divergence alarm).

The absolute default, ``explode_abs`` = 1e12, from the largest healthy totals measured
over a few hundred to 3,000 steps of the corpus (tests/corpus): transformers, LSTMs, CNNs
and MLPs with mean losses stay under 5 (a GPT-2-style decoder 0.7-4.4, an LSTM LM 0.05-0.9);
a sum-reduced cross-entropy over 1,024 tokens reaches 1.2e3; an un-normalised regression
target does not stop there — x1,000 targets 1.3e5 (mean) and 2.5e7 (sum over 256), targets
at house-price scale (3e5, mean squared error, Adam, which trains fine) 1.9e9. The norm
grows linearly with the target's scale, so the default sits 500x above the largest of
these, far below where a float32 norm overflows (1.8e19, the non-finite alarm). It is a
backstop for a norm that is huge from the first step or drifts up slowly; divergence is
the relative rules' job.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from .alerts import REMEDY, Alert
from .divergence import (
    EARLY_FACTOR,
    Explosion,
    LossJump,
    early_baseline,
    explosion_alert,
    level_of,
    loss_alerts,
    loss_watch,
)

if TYPE_CHECKING:
    from torch import Tensor

    from ..stream import Stream

#: Totals kept for the running median.
MEDIAN_WINDOW = 64
#: Sampled steps back inside the limits before an alarm re-arms.
REARM_SAMPLES = 20
#: Optimizer steps over which AMP skips are counted.
AMP_WINDOW = 100
#: Sampled steps a high level must last before the running median follows it.
ADAPT_SAMPLES = 100
#: Rows between two updates of the running median within one check (a full window).
REBASE_ROWS = 16


@dataclass
class Thresholds:
    """Alarm settings (the panel's settings; validated by the ``set_thresholds`` action)."""

    #: Total norm above this is an explosion (None: only the relative rules). See the
    #: module docstring for the data behind the default.
    explode_abs: float | None = 1e12
    #: Total norm above this many times its running median is an explosion (a noisy run
    #: raises the bar up to 10x this; see Detector._baseline).
    explode_factor: float = 10.0
    #: Samples in the running window before the running-median rule replaces the early
    #: rule (EARLY_FACTOR times the first samples' level).
    explode_warmup: int = 5
    #: A layer norm below this (and above 0) counts as vanishing.
    vanish_floor: float = 1e-8
    #: ... as does a layer norm below this fraction of the total norm.
    vanish_ratio: float = 1e-5
    #: ... for this many consecutive sampled steps.
    vanish_steps: int = 50
    #: GradScaler skips within the last AMP_WINDOW steps that raise an alarm.
    amp_skips: int = 10
    #: A GradScaler scale below this has collapsed.
    amp_min_scale: float = 1.0

    def to_json(self) -> dict[str, object]:
        return asdict(self)


class Detector:
    """Alarm state of one optimizer track, fed with host rows at each flush."""

    def __init__(self, track: str, thresholds: Thresholds) -> None:
        self.track = track
        self.th = thresholds
        self.window: deque[float] = deque(maxlen=MEDIAN_WINDOW)
        self.samples = 0
        self.level: Tensor | None = None  # per-layer running log-level (torch, CPU)
        self.vanish_run: Tensor | None = None
        self.armed = {"non_finite": True, "explosion": True, "amp": True}
        self.vanish_fired: set[int] = set()
        self.calm = {"non_finite": 0, "explosion": 0}
        self.hot = 0
        self.last_scale: float | None = None
        self.skipped = 0
        self.skip_steps: deque[int] = deque(maxlen=1000)
        self._level_calls = 0
        #: The last ``evaluate`` saw the total norm climbing: above the square root of
        #: the explosion factor times the running median (half way there on a log scale),
        #: or exploded. The monitor then samples every step for a while. Not for NaN/Inf:
        #: once a run is non-finite, sampling every step tells nothing more.
        self.rising = False
        #: The last step checked, and loss jumps waiting for the rows of their step.
        self.last_step = -1
        self.held: list[LossJump] = []

    def evaluate(
        self,
        steps: list[float],
        m: Tensor,
        layers: list[str],
        loss_nonfinite: bool = False,
        amp: bool = False,
        clipping: bool = False,
    ) -> list[Alert]:
        """Check rows ``m`` (``rows x (1 + L [+1])``, float32 CPU) taken at ``steps``.

        ``clipping``: the clip action is on, so the norms are before clipping and the
        remedies do not advise clipping."""
        import torch

        alerts: list[Alert] = []
        n_layers = len(layers)
        total = m[:, 0]
        lay = m[:, 1 : 1 + n_layers]
        if amp:
            alerts += self._amp(steps, m[:, 1 + n_layers].tolist())
        bad_cols = ~torch.isfinite(lay)
        finite_rows = torch.isfinite(total) & ~bad_cols.any(1)
        th = self.th
        baseline, factor = self._baseline()
        totals = total.tolist()
        finite_list = finite_rows.tolist()
        self.rising = False
        self.last_step = int(steps[-1]) if steps else self.last_step
        for i, (v, ok) in enumerate(zip(totals, finite_list, strict=True)):
            step = int(steps[i])
            if not ok:
                self.calm["non_finite"] = 0
                if self.armed["non_finite"]:
                    self.armed["non_finite"] = False
                    alerts.append(
                        self._non_finite(step, bad_cols[i], layers, v, loss_nonfinite, clipping)
                    )
                continue
            self.calm["non_finite"] += 1
            if self.calm["non_finite"] >= REARM_SAMPLES:
                self.armed["non_finite"] = True
            exploded = th.explode_abs is not None and v > th.explode_abs
            if baseline is not None and baseline > 0 and v > math.sqrt(factor) * baseline:
                self.rising = True
                if v > factor * baseline:
                    exploded = True
            if exploded:
                self.rising = True
                self.calm["explosion"] = 0
                self.hot += 1
                if self.armed["explosion"]:
                    self.armed["explosion"] = False
                    early = len(self.window) < th.explode_warmup
                    ex = Explosion(step, v, baseline, factor, early)
                    level = self.level if self.level is not None else level_of(lay[:i])
                    alerts.append(
                        explosion_alert(
                            self.track, ex, lay[i], layers, level, th.explode_abs, clipping
                        )
                    )
                if self.hot > ADAPT_SAMPLES:
                    # Sustained for long: this is the new normal level, not a spike.
                    self.window.append(v)
            else:
                self.hot = 0
                self.calm["explosion"] += 1
                if self.calm["explosion"] >= REARM_SAMPLES:
                    self.armed["explosion"] = True
                self.window.append(v)
                if len(self.window) < MEDIAN_WINDOW or i % REBASE_ROWS == 0:
                    # Still filling: follow every row; later every REBASE_ROWS rows, so a
                    # norm that grows steadily over one long check is followed too.
                    baseline, factor = self._baseline()
        alerts += self._vanishing(steps, total, lay, layers)
        self._update_levels(lay)
        self.samples += len(totals)
        return alerts

    def _baseline(self) -> tuple[float | None, float]:
        """Running median of the total, and how far above it counts as an explosion.

        The factor is ``explode_factor`` for a steady run and grows with the run's own
        noise (3 robust standard deviations of log-norm, from the median absolute
        deviation) up to 10x that, so a noisy small-batch run does not cry wolf. While
        the window holds fewer than ``explode_warmup`` samples: the smallest of them
        and ``EARLY_FACTOR`` (too few samples for a noise estimate; divergence.py).
        """
        positive = [math.log(v) for v in self.window if v > 0]
        if not positive:
            return None, self.th.explode_factor
        if len(self.window) < self.th.explode_warmup:
            return early_baseline(positive), max(EARLY_FACTOR, self.th.explode_factor)
        med = statistics.median(positive)
        mad = statistics.median(abs(x - med) for x in positive)
        spread = math.exp(min(50.0, 3 * 1.4826 * mad))
        factor = min(10 * self.th.explode_factor, max(self.th.explode_factor, spread))
        return math.exp(med), factor

    # --- detectors ------------------------------------------------------------------

    def _non_finite(
        self,
        step: int,
        bad: Tensor,
        layers: list[str],
        total: float,
        loss_nonfinite: bool,
        clipping: bool,
    ) -> Alert:
        idx = [j for j, b in enumerate(bad.tolist()) if b]
        origin = layers[idx[-1]] if idx else None
        n = len(idx)
        where = f"in {origin}" if origin else "in the total"
        more = f" ({n} of {len(layers)} layers non-finite)" if n > 1 else ""
        # The norms are the flags: a norm is NaN/Inf when a gradient value is, or when the
        # values are finite but so large that their norm overflows float32 (~1.8e19 each).
        if loss_nonfinite:
            msg = (
                f"Non-finite gradient at step {step} {where}{more}; the logged loss is "
                "non-finite too, so it comes from the forward pass or the loss."
            )
            remedy = REMEDY["non_finite_loss"]
        else:
            msg = (
                f"Non-finite gradient at step {step}: first {where}{more} "
                "(NaN/Inf values, or a norm beyond the float32 range)."
            )
            remedy = REMEDY["non_finite_clipping" if clipping else "non_finite"]
        return Alert("non_finite", "error", step, origin, msg, remedy, self.track, total)

    def loss_alerts(self, stream: Stream, alerts: list[Alert]) -> list[Alert]:
        """Divergence alerts for the logged loss's new jumps (``divergence.loss_alerts``).
        A loss is logged before its step's gradients reach the hook, so a jump at or past
        the last step checked waits for the next check (once), to meet its gradients."""
        jumps = self.held + loss_watch(stream).scan(stream)
        ready = [j for j in jumps if j.step < self.last_step or j in self.held]
        self.held = [j for j in jumps if j not in ready]
        told = not (self.armed["explosion"] and self.armed["non_finite"])
        return loss_alerts(self.track, ready, alerts, told)

    def _vanishing(
        self, steps: list[float], total: Tensor, lay: Tensor, layers: list[str]
    ) -> list[Alert]:
        import torch

        rows, n = lay.shape
        if rows == 0 or n == 0:
            return []
        th = self.th
        if self.vanish_run is None or self.vanish_run.shape[0] != n:
            self.vanish_run = torch.zeros(n, dtype=torch.long)
        floor = (total.double() * th.vanish_ratio).clamp_min(th.vanish_floor).unsqueeze(1)
        # Exactly 0 is not "vanishing" (unused branch, grad None): that is a different story.
        # NaN compares False and +Inf is never below, so non-finite rows break a run.
        below = (lay > 0) & (lay < floor)
        if not bool(below.any()):
            if self.vanish_fired or bool(self.vanish_run.any()):
                self.vanish_run.zero_()
                self.vanish_fired.clear()
            return []
        # Consecutive run at the end of these rows, continuing the previous run if unbroken.
        ar = torch.arange(rows).unsqueeze(1)
        last_break = torch.where(below, -1, ar).amax(0)
        run = torch.where(last_break < 0, self.vanish_run + rows, rows - 1 - last_break)
        self.vanish_run = run
        hit = (run >= th.vanish_steps).nonzero().flatten().tolist()
        if self.vanish_fired:
            recovered = set((run == 0).nonzero().flatten().tolist())
            self.vanish_fired -= recovered
            # One condition, one alert: while some layers are still vanished, more layers
            # joining them is the same story (re-armed once every layer has recovered).
            self.vanish_fired.update(hit)
            return []
        if not hit:
            return []
        new = hit
        self.vanish_fired.update(hit)
        j0 = min(new)
        # The row at which this layer's run reached vanish_steps (not just the last row).
        at = max(0, rows - 1 - (int(run[j0]) - th.vanish_steps))
        step = int(steps[at])
        v = float(lay[at, j0])
        others = len(new) - 1
        more = f" and {others} more layer{'s' if others > 1 else ''}" if others else ""
        msg = (
            f"Vanishing gradient: {layers[j0]}{more} below {th.vanish_floor:g} "
            f"(or {th.vanish_ratio:g} of the total) for {th.vanish_steps} sampled steps, "
            f"by step {step}."
        )
        return [
            Alert("vanishing", "warning", step, layers[j0], msg, REMEDY["vanishing"], self.track, v)
        ]

    def _amp(self, steps: list[float], scales: list[float]) -> list[Alert]:
        """Skipped steps from the scale (R31): each halving is one step GradScaler skipped.

        A skipped step never reaches the optimizer (so never this hook); the scale it
        halved shows it. Skips are counted and marked, never alarmed one by one; the alarm
        is for many skips in a short run, or a scale that has collapsed.
        """
        alerts: list[Alert] = []
        for s, sc in zip(steps, scales, strict=True):
            if not math.isfinite(sc) or sc <= 0:
                continue
            prev, self.last_scale = self.last_scale, sc
            if prev is not None and sc < prev:
                k = max(1, round(math.log2(prev / sc)))
                self.skipped += k
                self.skip_steps.extend([int(s)] * k)
            recent = sum(1 for x in self.skip_steps if x > s - AMP_WINDOW)
            if not self.armed["amp"]:
                if recent == 0 and sc >= self.th.amp_min_scale:
                    self.armed["amp"] = True
                continue
            if sc < self.th.amp_min_scale:
                self.armed["amp"] = False
                msg = f"GradScaler's loss scale collapsed to {sc:g} by step {int(s)}."
                alerts.append(
                    Alert(
                        "amp_scale_collapse",
                        "error",
                        int(s),
                        None,
                        msg,
                        REMEDY["amp_scale_collapse"],
                        self.track,
                        sc,
                    )
                )
            elif recent >= self.th.amp_skips:
                self.armed["amp"] = False
                msg = (
                    f"GradScaler skipped {recent} optimizer steps in the last {AMP_WINDOW} "
                    f"(up to step {int(s)}): inf/NaN in the scaled gradients."
                )
                alerts.append(
                    Alert(
                        "amp_skips",
                        "warning",
                        int(s),
                        None,
                        msg,
                        REMEDY["amp_skips"],
                        self.track,
                        sc,
                    )
                )
        return alerts

    def _update_levels(self, lay: Tensor) -> None:
        """Per-layer running level (EMA of log norm over finite, positive values).

        Only used to say which layer jumped in an explosion, so a slowly updated level
        is enough: refreshed on every 4th check.
        """
        import torch

        self._level_calls += 1
        if lay.shape[0] == 0 or (self.level is not None and self._level_calls % 4):
            return
        lg = torch.log(lay.double().clamp_min(1e-30))
        ok = torch.isfinite(lay).all(0) & (lay > 0).all(0)
        mean = lg.mean(0)
        if self.level is None or self.level.shape != mean.shape:
            self.level = torch.where(ok, mean, torch.zeros_like(mean))
            return
        self.level = torch.where(ok, self.level + 0.2 * (mean - self.level), self.level)
