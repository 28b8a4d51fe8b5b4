"""Explosion and divergence of the gradient norm, judged on the run's own scale.

One ``ScaleJudge`` per track (inside alarms.Detector) reads the total norm of each
sampled step, at flush time on the host, and the weights' norms the monitor reads about
once a second (``observe_weights``). Its rules:

- **explosion** (one step): above ``EARLY_FACTOR`` (x100) times the first samples' level
  while the window fills, then above ``explode_factor`` (x10, raised by the run's own
  noise up to x100) times the running median, or above ``explode_abs`` (divergence.py).
- **what matters** (issue #22): a relative jump counts only when the norm is also above
  the run's early level (the median of its first ``EARLY_LEVEL_SAMPLES`` finite totals)
  and the update it makes is of consequence against the weights' norm: ``lr * norm`` at
  least ``UPDATE_FLOOR`` (1e-3) of it where the learning rate is known (torch.optim),
  else the norm itself at least ``WEIGHT_FLOOR`` (1e-4) of it. A converged model's tiny
  norm jittering x10-x400 around a median that shrank by orders of magnitude is no
  explosion, whatever its ratio.
- **sustained growth** is divergence below the single-step bar: above ``SUSTAIN_FACTOR``
  (x10) times the baseline for ``SUSTAIN_SAMPLES`` (10) sampled steps in a row (values
  that high stay out of the window, so the median does not absorb them).
- **the first updates**: the weights are read at each of the track's first
  ``EARLY_UPDATES`` + 1 (6) steps; updates that multiply the weights' norm by more than
  ``FIRST_UPDATE_FACTOR`` (x2) in that span are divergence from step 1, whatever the
  gradient norm says (with a clip in the loop, the norm cannot say it). An explosion
  within those steps carries the fact instead; a later one is the same story.
- a loop that clips by value is read before its clip: a one-step spike is what that clip
  bounds, so only the divergence rules judge it (alerts.Clipping).

The figures behind the thresholds, measured with tests/corpus/measure.py (each run
trained plainly, its per-step total norm as the monitor reads it: after the loop's own
clip; the weights' norm before each update). "Healthy" is the largest value over a run
of the healthy families; "failing" the range over the failing runs, where it shows.

==================================================  =========  ==================
figure (rule)                                       healthy    failing
==================================================  =========  ==================
sampled steps in a row above x10 the baseline       1          10-59 (1)
  (sustained; a converged focal-loss run: 13, under
  its early level, gated)
weights' norm after the first 5 updates / before    1.11       9.9-256 (2)
weights' norm, largest ratio over one update        1.05       3.9-5.8e10
norm / early level at a median-rule jump            0.83       13-130
  (converged focal loss: hard-sample spikes)
lr * norm / weights' norm at a median-rule jump     1.7e-4     >= 1
  (converged classifier trained again, SGD)
norm / weights' norm at a median-rule jump          2e-6       0.011
  (converged; a loop without torch.optim)
==================================================  =========  ==================

(1) where the norm shows it: GPT-2 at AdamW lr 1 and 0.3, and the word LM clipped at
lr 400, hold under x10 (the first updates catch them). (2) a run diverging from step 1;
LR bumps after a healthy start leave the first updates alone (1.0) and are the explosion
rule's (x23.7-x34 in one update, the norm x97-x108 its median).

Healthy: the word-language-model LSTM updated by hand at lr 20 with
``clip_grad_norm_(0.25)`` (and with torch.optim.SGD), GPT-2 from a tiny ``transformers``
config under AdamW at 6e-4 (warm-up), 3e-3 and 1e-2, a GPT-style decoder, a
transformer-encoder classifier (AdamW 1e-3, Adam 1e-4), an MLP classifier, a focal-loss
``nn.Module``, a CNN with BatchNorm (batch 16 and 2), an LSTM LM under Adam (its norm
grows x22 from tiny first gradients), a zero-initialised head, LoRA adapters, a batch-1
regression, x1000 regression targets (the norm grows x180 over 600 steps: the window
follows it), and classifiers trained to a loss of ~1e-6 then trained again (Adam 1e-3,
AdamW 1e-4, SGD 0.1; the previous rules gave 1-8 false explosions per 600 steps there,
"0.000414 is 10x its running median"). Failing: GPT-2 under AdamW at lr 5, 1 and 0.3
(first update x88, x18, x5.4; at lr 5 the norm then holds x20-x80 for 60 steps and the
loss goes 4.8 -> 2,000), SGD at lr 1e3, an LR bump 6e-4 -> 5 at step 100, a GPT-style
decoder at lr 10, the encoder at lr 5, the word LM by hand at lr 400 clipped at 0.25 (its
clipped norm never moves; its first update takes the weights x3.9), the word LM at lr 20
without its clip (x200 at step 5) and with an LR bump to 2,000, an LSTM LM under Adam at
lr 1, a CNN LR bump 0.1 -> 100, an MLP under SGD at lr 1e3. Every healthy run is quiet
and every failing run alarmed with the defaults.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from .alerts import Alert, Clipping
from .divergence import (
    EARLY_FACTOR,
    EARLY_LEVEL_SAMPLES,
    EARLY_UPDATES,
    FIRST_UPDATE_FACTOR,
    SUSTAIN_FACTOR,
    SUSTAIN_SAMPLES,
    UPDATE_FLOOR,
    WEIGHT_FLOOR,
    Explosion,
    Sustained,
    WeightRead,
    early_baseline,
    explosion_alert,
    first_update_alert,
    first_update_fact,
    sustained_alert,
)

if TYPE_CHECKING:
    from torch import Tensor

    from .thresholds import Thresholds

#: Totals kept for the running median.
MEDIAN_WINDOW = 64
#: Sampled steps back inside the limits before an alarm re-arms.
REARM_SAMPLES = 20
#: Sampled steps a high level must last before the running median follows it.
ADAPT_SAMPLES = 100
#: Rows between two updates of the running median within one check (a full window).
REBASE_ROWS = 16


class ScaleJudge:
    """The total norm's explosion and divergence rules for one track (module docstring).
    ``armed`` is the detector's alarm state (shared: the loss watch reads it)."""

    def __init__(self, track: str, th: Thresholds, armed: dict[str, bool]) -> None:
        self.track = track
        self.th = th
        self.armed = armed
        self.window: deque[float] = deque(maxlen=MEDIAN_WINDOW)
        self.calm = 0
        self.hot = 0
        #: The last check saw the total norm climbing: above the square root of the
        #: explosion factor times the running median (half way there on a log scale), or
        #: exploded, while the explosion alarm is still to be given, for a norm that
        #: matters. The monitor then samples every step for a while (stride.boost).
        self.rising = False
        #: The run's early level: its first EARLY_LEVEL_SAMPLES finite, not exploded totals.
        self.early: list[float] = []
        #: The weights' norm as last read (periodic), and the first two reads of the run.
        self.weight_norm: float | None = None
        self.weight_reads: list[WeightRead] = []
        self.first_update_checked = False
        self.lr: float | None = None
        #: Sampled steps in a row above SUSTAIN_FACTOR times the baseline, from ``since``.
        self.streak = 0
        self.streak_since = 0
        self.streak_peak = 0.0
        #: The step of the last explosion alarm (-1: none yet).
        self.exploded_at = -1
        self._baseline_now: tuple[float | None, float] = (None, th.explode_factor)
        self._first: tuple[WeightRead, WeightRead] | None = None

    def observe_weights(self, steps: list[float], m: Tensor) -> None:
        """Rows of the weights' norms (``[total, layer_1..L]`` per read, host) at flush:
        the latest total is the scale the gradient norm is judged against; the track's
        first two reads, when at consecutive steps, give the first update's size."""
        totals = m[:, 0].tolist()
        for i, (x, w) in enumerate(zip(steps, totals, strict=True)):
            if not math.isfinite(w):
                continue
            self.weight_norm = w
            reads = self.weight_reads
            if len(reads) <= EARLY_UPDATES and (not reads or int(x) == reads[-1].step + 1):
                reads.append(WeightRead(int(x), w, m[i, 1:].clone()))

    # --- one check ---------------------------------------------------------------------

    def begin(self, lr: float | None) -> None:
        """A check starts (``lr``: the optimizer's largest, None when unknown)."""
        self.lr = lr
        self.rising = False
        self._first = self._first_update()
        self._baseline_now = self._baseline()

    def broken(self) -> None:
        """A non-finite row: a stretch of high norms is broken (another alarm's story)."""
        self.streak = 0

    def row(
        self,
        i: int,
        step: int,
        v: float,
        lay: Tensor,
        layers: list[str],
        clip: Clipping,
        level: Callable[[], Tensor | None],
    ) -> list[Alert]:
        """Judge one finite total ``v`` (row ``i`` of the check, its per-layer ``lay``)."""
        th = self.th
        baseline, factor = self._baseline_now
        # Before a value clip the loop does itself, a one-step spike is what that clip
        # bounds: only the divergence rules judge those norms.
        spikes_count = clip.after_user or clip.user != "clip_grad_value_"
        # (cheap first: most rows are nowhere near the baseline's multiples)
        low = min(math.sqrt(factor), SUSTAIN_FACTOR, factor)
        near = baseline is not None and baseline > 0 and v > low * baseline
        big = near and self._matters(v)
        hot = big and v > min(SUSTAIN_FACTOR, factor) * baseline  # type: ignore[operator]
        spike = big and spikes_count and v > factor * baseline  # type: ignore[operator]
        exploded = (th.explode_abs is not None and v > th.explode_abs) or spike
        armed = self.armed["explosion"]  # rising: while its alarm is still to come
        if big and armed and v > math.sqrt(factor) * baseline:  # type: ignore[operator]
            self.rising = True
        if not (exploded or hot):
            self.hot = self.streak = 0
            self.calm += 1
            if self.calm >= REARM_SAMPLES:
                self.armed["explosion"] = self.armed["divergence"] = True
            self.window.append(v)
            if len(self.early) < EARLY_LEVEL_SAMPLES:
                self.early.append(v)
            if len(self.window) < MEDIAN_WINDOW or i % REBASE_ROWS == 0:
                # Still filling: follow every row; later every REBASE_ROWS rows, so a
                # norm that grows steadily over one long check is followed too.
                self._baseline_now = self._baseline()
            return []
        alerts: list[Alert] = []
        self.rising = self.rising or armed
        self.calm = 0
        self.hot += 1
        first = self._first
        if exploded and armed and first is not None and step > first[1].step:
            self.armed["explosion"] = False  # told by the first updates' divergence
        elif exploded and armed:
            self.armed["explosion"] = False
            self.exploded_at = step
            ex = Explosion(step, v, baseline, factor, len(self.window) < th.explode_warmup)
            alerts.append(
                explosion_alert(self.track, ex, lay, layers, level(), th.explode_abs, clip)
            )
        alerts += self._sustained(step, v, hot, baseline, clip, lay, layers, level)
        if self.hot > ADAPT_SAMPLES:
            self.window.append(v)  # sustained for long: the new normal level, not a spike
        return alerts

    def finish(self, alerts: list[Alert], layers: list[str]) -> None:
        """The check's end: the first updates' divergence, unless an explosion within
        those updates tells the story (then it carries the fact; a later one in the same
        check was the same story, ``row``). Edits ``alerts``."""
        first, self._first = self._first, None
        if first is None:
            return
        fresh = [a for a in alerts if a.kind == "explosion"]
        if fresh:
            fresh[0].message += " " + first_update_fact(*first)
        else:
            alerts.insert(0, first_update_alert(self.track, *first, layers))
            self.armed["explosion"] = False  # told: the run diverges from its step 1

    # --- the rules ------------------------------------------------------------------------

    def _matters(self, v: float) -> bool:
        """A norm big enough for a jump in it to matter (module docstring): above the
        run's early level, and an update of consequence against the weights' norm."""
        if self.early and v <= statistics.median(self.early):
            return False
        w = self.weight_norm
        if w is None or w <= 0:
            return True
        if self.lr is not None:
            return self.lr * v >= UPDATE_FLOOR * w
        return v >= WEIGHT_FLOOR * w

    def _sustained(
        self,
        step: int,
        v: float,
        hot: bool,
        baseline: float | None,
        clip: Clipping,
        row: Tensor,
        layers: list[str],
        level: Callable[[], Tensor | None],
    ) -> list[Alert]:
        """Count sampled steps in a row above SUSTAIN_FACTOR times the baseline; at
        SUSTAIN_SAMPLES that is divergence (once, re-armed with the explosion alarm)."""
        if not hot or baseline is None:
            self.streak = 0
            return []
        if self.streak == 0:
            self.streak_since, self.streak_peak = step, 0.0
        self.streak += 1
        self.streak_peak = max(self.streak_peak, v / baseline)
        if self.streak < SUSTAIN_SAMPLES or not self.armed["divergence"]:
            return []
        self.armed["divergence"] = False
        if self.exploded_at >= self.streak_since:
            return []  # one story, one alert: the explosion at its start told it
        su = Sustained(self.streak_since, step, self.streak, v, baseline, self.streak_peak)
        return [sustained_alert(self.track, su, row, layers, level(), clip)]

    def _first_update(self) -> tuple[WeightRead, WeightRead] | None:
        """The run's first weight reads (consecutive steps): the first time the first
        updates took the weights' norm past FIRST_UPDATE_FACTOR times its start (once)."""
        reads = self.weight_reads
        if self.first_update_checked or len(reads) < 2:
            return None
        a = reads[0]
        if a.total > 0 and self.armed["divergence"]:
            for b in reads[1:]:
                if b.total > FIRST_UPDATE_FACTOR * a.total:
                    self.first_update_checked = True
                    self.armed["divergence"] = False
                    return a, b
        self.first_update_checked = len(reads) > EARLY_UPDATES
        return None

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
