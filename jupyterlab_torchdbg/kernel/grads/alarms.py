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

The explosion and divergence rules on the total norm, judged on the run's own scale,
are explosion.py's (``ScaleJudge``), with the figures they were set from; the logged
loss's divergence alarm is divergence.py's.

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
from collections import deque
from typing import TYPE_CHECKING

from .alerts import REMEDY, Alert, Clipping
from .divergence import LossJump, LossWatch, level_of, loss_alerts
from .explosion import REARM_SAMPLES as REARM_SAMPLES
from .explosion import ScaleJudge
from .thresholds import Thresholds as Thresholds

if TYPE_CHECKING:
    from torch import Tensor

    from ..stream import Stream

#: Optimizer steps over which AMP skips are counted.
AMP_WINDOW = 100


class Detector:
    """Alarm state of one optimizer track, fed with host rows at each flush."""

    def __init__(self, track: str, thresholds: Thresholds) -> None:
        self.track = track
        self.samples = 0
        self.level: Tensor | None = None  # per-layer running log-level (torch, CPU)
        self.vanish_run: Tensor | None = None
        self.armed = {"non_finite": True, "explosion": True, "amp": True, "divergence": True}
        self.vanish_fired: set[int] = set()
        self.calm = {"non_finite": 0}
        self.last_scale: float | None = None
        self.skipped = 0
        self.skip_steps: deque[int] = deque(maxlen=1000)
        self._level_calls = 0
        #: The explosion and divergence rules on the total norm (explosion.py).
        self.judge = ScaleJudge(track, thresholds, self.armed)
        self.th = thresholds
        #: The last step checked, and loss jumps waiting for the rows of their step.
        self.last_step = -1
        self.held: list[LossJump] = []

    @property
    def th(self) -> Thresholds:
        return self._th

    @th.setter
    def th(self, th: Thresholds) -> None:
        self._th = self.judge.th = th

    @property
    def rising(self) -> bool:
        """The last check saw the total norm climbing (explosion.py, stride.boost)."""
        return self.judge.rising

    @property
    def window(self) -> deque[float]:
        return self.judge.window

    def observe_weights(self, steps: list[float], m: Tensor) -> None:
        """The weights' norms as read (explosion.py): the scale a norm is judged on."""
        self.judge.observe_weights(steps, m)

    def evaluate(
        self,
        steps: list[float],
        m: Tensor,
        layers: list[str],
        loss_nonfinite: bool = False,
        amp: bool = False,
        clipping: bool | Clipping = False,
        lr: float | None = None,
    ) -> list[Alert]:
        """Check rows ``m`` (``rows x (1 + L [+1])``, float32 CPU) taken at ``steps``.

        ``clipping``: what clips these gradients (``True``: the panel's clip action is
        on, so the norms are before clipping); the remedies never advise a clip there is.
        ``lr``: the optimizer's learning rate (its largest group's), None when unknown
        (a loop without torch.optim): the size of an update against the weights.
        """
        import torch

        clip = clipping if isinstance(clipping, Clipping) else Clipping(action=bool(clipping))
        alerts: list[Alert] = []
        n_layers = len(layers)
        total = m[:, 0]
        lay = m[:, 1 : 1 + n_layers]
        if amp:
            alerts += self._amp(steps, m[:, 1 + n_layers].tolist())
        bad_cols = ~torch.isfinite(lay)
        finite_rows = torch.isfinite(total) & ~bad_cols.any(1)
        totals = total.tolist()
        finite_list = finite_rows.tolist()
        judge = self.judge
        judge.begin(lr)
        self.last_step = int(steps[-1]) if steps else self.last_step
        for i, (v, ok) in enumerate(zip(totals, finite_list, strict=True)):
            step = int(steps[i])
            clip_i = clip.at(step)  # the panel's clip as it was at this row's step
            if not ok:
                self.calm["non_finite"] = 0
                judge.broken()
                if self.armed["non_finite"]:
                    self.armed["non_finite"] = False
                    alerts.append(
                        self._non_finite(step, bad_cols[i], layers, v, loss_nonfinite, clip_i)
                    )
                continue
            self.calm["non_finite"] += 1
            if self.calm["non_finite"] >= REARM_SAMPLES:
                self.armed["non_finite"] = True

            def level(i: int = i) -> Tensor | None:
                return self.level if self.level is not None else level_of(lay[:i])

            alerts += judge.row(i, step, v, lay[i], layers, clip_i, level)
        judge.finish(alerts, layers)
        alerts += self._vanishing(steps, total, lay, layers)
        self._update_levels(lay)
        self.samples += len(totals)
        return alerts

    # --- detectors ------------------------------------------------------------------

    def _non_finite(
        self,
        step: int,
        bad: Tensor,
        layers: list[str],
        total: float,
        loss_nonfinite: bool,
        clip: Clipping,
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
                "(NaN/Inf values, or finite values whose norm overflows float32)."
            )
            # a clip there is (the panel's or the loop's own) cannot help a NaN
            remedy = REMEDY["non_finite_clipping" if clip.any else "non_finite"]
        return Alert("non_finite", "error", step, origin, msg, remedy, self.track, total)

    def loss_alerts(self, stream: Stream, watch: LossWatch, alerts: list[Alert]) -> list[Alert]:
        """Divergence alerts for the logged loss's new jumps (``divergence.loss_alerts``).
        A loss is logged before its step's gradients reach the hook, so a jump at or past
        the last step checked waits for the next check (once), to meet its gradients."""
        jumps = self.held + watch.scan(stream)
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
