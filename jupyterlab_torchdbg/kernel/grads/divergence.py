"""Divergence from step 1: the early explosion rule's numbers, the explosion alert (which
layer carries the norm), and the logged loss's divergence alarm (``LossWatch``).

Why an early rule. A running median needs a few samples, and a run that diverges at
step 2 fills its window with exploded values: AdamW at a far too high learning rate
takes the total norm x100-x400 and the loss x500-x30,000 within two steps (measured on
the corpus in tests/corpus: a GPT-2-style decoder at lr 10 goes 0.73 -> 105 at step 2,
an LSTM LM under Adam at lr 1 goes 0.048 -> 11 -> 102 -> 9,240). So until the window
holds ``explode_warmup`` samples the baseline is the smallest of the samples seen so far
(the first sample alone at step 2), and the bar is ``EARLY_FACTOR``: a climb of x100 over
the first steps counts whether it comes in one jump or in three (a word-LM updated by
hand at lr 400, clipped in the loop: 0.06 -> 1.55 -> 4.8 -> 25.6, x427 by step 4, each
step under x30; a median baseline climbs with it and never sees it).
Exploded values never enter the window (alarms.py), so the baseline stays the healthy
level of the first steps.

``EARLY_FACTOR`` = 100, from data: over the first samples of healthy corpus runs the total
grows by at most x17 against the first sample (an LSTM LM whose first gradients are
small: 0.05 -> 0.85 in ten steps; transformers with LR warm-up x2, CNNs with BatchNorm
x2.5, AMP x2), and step 2 of the diverging runs above is x144 and x230. x100 leaves a 6x
margin on the healthy side; a slower divergence is the running-median rule's.

The logged loss (series whose name contains "loss", not "scale": GradScaler's loss scale
grows by design; positive losses only, a ratio means nothing otherwise). A value above
``LOSS_FACTOR`` (x100) times its running level (the lower median of its recent values,
jumps left out, so the level of step 1 while the run is young) and above
``LOSS_EARLY_FACTOR`` (x10) times its first values is a divergence, at the logged step of
that value. From the corpus: diverging runs jump x85-x1,000 in one step against their
level (AdamW at lr 10 from step 1: 4.16 -> 2,040; an LR bump after a healthy start:
3.2 -> 492, 0.3 -> 3,840, an LSTM LM whose gradients the user clips: 1.0 -> 354); a
healthy loss never rose above x2.6 its first values (losses fall; a batch-1 regression
is the noisiest), while against its recent level a late batch-1 loss can jump x1000 (a
sample the model has not fitted among ones it has): the second condition is what keeps
those quiet. A gradual rise (an auxiliary KL term that grows as the encoder learns) moves
the level with it.

Which layer is named at an explosion: the one carrying the norm, by its share of the
squared total (``layer**2 / total**2``: squared norms add up over disjoint parameters) —
"model.lstm carries 98% of the norm". The layer that grew most against its own level is a
second fact when it differs (an embedding in front of an LSTM can jump x1000 while
holding 0.1% of the norm: it is not where the norm is).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .alerts import REMEDY, Alert, Clipping

if TYPE_CHECKING:
    from torch import Tensor

    from ..stream import Stream

#: Until the window holds ``explode_warmup`` samples: a total this many times the
#: smallest of the samples so far is an explosion (at least ``explode_factor``).
EARLY_FACTOR = 100.0
#: The run's early level (a jump must also exceed it to matter): the median of this many
#: first finite, not exploded totals.
EARLY_LEVEL_SAMPLES = 5
#: A jump must also make an update ``lr * norm`` of at least this fraction of the
#: weights' norm to matter (the learning rate known: torch.optim) ...
UPDATE_FLOOR = 1e-3
#: ... or, with no learning rate known, be at least this fraction of it.
WEIGHT_FLOOR = 1e-4
#: This many times the baseline ...
SUSTAIN_FACTOR = 10.0
#: ... held for this many sampled steps in a row is divergence.
SUSTAIN_SAMPLES = 10
#: The first updates of a run (the weights are read at each of their steps) ...
EARLY_UPDATES = 5
#: ... multiplying the weights' norm by more than this is divergence.
FIRST_UPDATE_FACTOR = 2.0
#: A positive logged loss this many times its running level (the lower median of its
#: last ``LOSS_WINDOW`` values, jumps left out) is a divergence ...
LOSS_FACTOR = 100.0
#: ... if it is also this many times its first values (a loss that fell x1000 and comes
#: back to a tenth of where it started is noise, not a divergence).
LOSS_EARLY_FACTOR = 10.0
#: Logged loss values that are its "first values".
LOSS_BASELINE_POINTS = 5
#: Loss values in the running level.
LOSS_WINDOW = 64
#: Loss points back under ``sqrt(LOSS_FACTOR)`` times the level before it re-arms.
LOSS_REARM_POINTS = 20


def times(r: float) -> str:
    """A ratio for a message: "2.2x", "144x", "3.1e+04x"."""
    return f"{r:.2g}x" if r < 10 or r >= 1e4 else f"{r:.0f}x"


def early_baseline(logs: list[float]) -> float:
    """The smallest of the first samples' norms, from their logs (module docstring)."""
    return math.exp(min(logs))


@dataclass
class Explosion:
    """What an explosion alert needs to say, collected where the row is examined."""

    step: int
    value: float
    baseline: float | None
    factor: float
    early: bool


def explosion_alert(
    track: str,
    ex: Explosion,
    row: Tensor,
    layers: list[str],
    level: Tensor | None,
    explode_abs: float | None,
    clip: Clipping,
) -> Alert:
    """The explosion alert: why it fired, the layer carrying the norm, and a remedy that
    fits (no clipping advice where a clip is on: the panel's, or the loop's own)."""
    carrier, share, jumper, jump = carrying_layer(row, ex.value, layers, level)
    v, b = ex.value, ex.baseline
    if b is not None and b > 0 and v > ex.factor * b:
        ref = "the level of the first steps" if ex.early else "its running median"
        why = f"{times(v / b)} {ref} {b:.3g} (alarm above {ex.factor:.0f}x)"
    else:
        why = f"above the threshold {explode_abs:g}"
    msg = (
        f"Gradient explosion at step {ex.step}: total norm{clip.read_note()} {v:.3g} is "
        f"{why}{_where(carrier, share, jumper, jump)}."
    )
    if clip.action:
        remedy = REMEDY["explosion_clipping"]
    elif clip.user is not None:
        remedy = REMEDY["explosion_user_clip"]
    else:
        remedy = REMEDY["explosion"]
    return Alert("explosion", "warning", ex.step, carrier, msg, remedy, track, v)


def _where(carrier: str | None, share: float, jumper: str | None, jump: float) -> str:
    if carrier is None:
        return ""
    where = f"; {carrier} carries {share:.0%} of the norm"
    if jumper is not None and jumper != carrier:
        where += f", the largest jump is in {jumper} ({times(jump)} its own level)"
    return where


@dataclass
class Sustained:
    """A stretch of sampled steps above SUSTAIN_FACTOR times the baseline."""

    since: int
    step: int
    samples: int
    value: float
    baseline: float
    peak: float


def sustained_alert(
    track: str,
    su: Sustained,
    row: Tensor,
    layers: list[str],
    level: Tensor | None,
    clip: Clipping,
) -> Alert:
    """Divergence from the gradient norm: held far above its level, below the single-step
    bar. At the stretch's first step (where it went wrong), told when it is certain."""
    carrier, share, jumper, jump = carrying_layer(row, su.value, layers, level)
    msg = (
        f"Gradient divergence from step {su.since}: the total norm{clip.read_note()} has "
        f"stayed above {SUSTAIN_FACTOR:.0f}x its level before ({su.baseline:.3g}) for "
        f"{su.samples} sampled steps (up to {times(su.peak)}; {su.value:.3g} at step "
        f"{su.step}){_where(carrier, share, jumper, jump)}."
    )
    return Alert(
        "divergence", "error", su.since, carrier, msg, REMEDY["divergence_grads"], track, su.value
    )


@dataclass
class WeightRead:
    """One periodic read of the weights' norms: its step, total and per-layer norms."""

    step: int
    total: float
    layers: Tensor


def first_update_alert(track: str, a: WeightRead, b: WeightRead, layers: list[str]) -> Alert:
    """The first updates moved the weights by more than their own size (divergence from
    step 1, whatever the gradient norm says). Names the layer whose norm grew most."""
    import torch

    grown = None
    if a.layers.shape == b.layers.shape and a.layers.numel() == len(layers) > 0:
        growth = torch.nan_to_num(b.layers.double() - a.layers.double(), nan=-math.inf)
        j = int(torch.argmax(growth))
        if math.isfinite(float(growth[j])) and float(growth[j]) > 0:
            grown = layers[j]
    where = f"; {grown} grew most" if grown is not None else ""
    fact = first_update_fact(a, b)
    step = b.step - 1  # the update that took it past the bar
    msg = f"Divergence at step {step}: {fact[0].lower()}{fact[1:-1]}{where}."
    r = b.total / a.total
    return Alert("divergence", "error", step, grown, msg, REMEDY["divergence_grads"], track, r)


def first_update_fact(a: WeightRead, b: WeightRead) -> str:
    """The first updates' size, as a sentence (also added to an explosion's message)."""
    r = b.total / a.total
    which = (
        f"The update of step {a.step}"
        if b.step == a.step + 1
        else f"The {b.step - a.step} updates of steps {a.step}-{b.step - 1}"
    )
    return (
        f"{which} took the weights' norm from {a.total:.3g} to {b.total:.3g} ({times(r)}; "
        f"alarm above {FIRST_UPDATE_FACTOR:g}x within the first {EARLY_UPDATES})."
    )


def level_of(lay: Tensor) -> Tensor | None:
    """Per-layer log-level of the rows before an alarm in a detector's first check (no
    running level yet); None when there are none."""
    import torch

    if lay.shape[0] == 0:
        return None
    return torch.log(lay.double().clamp_min(1e-30)).mean(0)


def carrying_layer(
    row: Tensor, total: float, layers: list[str], level: Tensor | None
) -> tuple[str | None, float, str | None, float]:
    """(layer with the largest share of the squared total, its share, layer that grew
    most against its own running log-level, by how many times); Nones when unknown."""
    import torch

    if not layers or row.numel() == 0:
        return None, 0.0, None, 0.0
    r = row.double()
    sq = torch.nan_to_num(r * r, nan=0.0, posinf=0.0)
    i = int(torch.argmax(sq))
    denom = total * total if math.isfinite(total) and total > 0 else float(sq.sum())
    share = min(1.0, float(sq[i]) / denom) if denom > 0 else 0.0
    jumper, jump = None, 0.0
    if level is not None and level.shape == r.shape:
        growth = torch.log(r.clamp_min(1e-30)) - level
        growth = torch.nan_to_num(growth, nan=-math.inf)
        j = int(torch.argmax(growth))
        jumper, jump = layers[j], math.exp(min(700.0, float(growth[j])))
    return layers[i], share, jumper, jump


# --- the logged loss -------------------------------------------------------------------


def is_loss_name(name: str) -> bool:
    low = name.lower()
    return "loss" in low and "scale" not in low


@dataclass
class _LossState:
    """One loss series: its first values, its recent level, the last x read, the alarm."""

    first: list[float] = field(default_factory=list)
    window: deque[float] = field(default_factory=lambda: deque(maxlen=LOSS_WINDOW))
    level: float = math.nan
    last_x: float = -math.inf
    watched: bool = True
    armed: bool = True
    calm: int = 0
    seen: int = 0

    def relevel(self) -> None:
        self.level = statistics.median_low(self.window) if self.window else math.nan


@dataclass
class LossJump:
    name: str
    step: int
    value: float
    #: The running level it jumped from.
    baseline: float


class LossWatch:
    """The divergence alarm on the logged loss series of one stream (see the docstring).

    Reads the points flushed since its last look straight from the stream's history (at
    flush time, on the host: nothing per step). A history that went back (cleared, or a
    new run logging from step 0 again) starts a new baseline.
    """

    def __init__(self) -> None:
        self._series: dict[str, _LossState] = {}

    def scan(self, stream: Stream) -> list[LossJump]:
        """The new jumps of the loss series (once each, re-armed after a calm stretch)."""
        jumps: list[LossJump] = []
        for name, xs, ys in self._new_points(stream):
            st = self._series[name]
            for x, y in zip(xs, ys, strict=True):
                if self._is_jump(st, y):
                    jumps.append(LossJump(name, int(x), y, st.level))
        return jumps

    def _is_jump(self, st: _LossState, y: float) -> bool:
        """Feed one value; True when it is a new jump (see the module docstring)."""
        if not st.watched or not math.isfinite(y):
            return False
        if len(st.first) < LOSS_BASELINE_POINTS and y <= 0:
            st.watched = False  # not a positive loss: a ratio means nothing
            return False
        if st.first and st.level > 0:
            early = early_baseline([math.log(v) for v in st.first])
            if y > LOSS_FACTOR * st.level and y > LOSS_EARLY_FACTOR * early:
                st.calm = 0  # exploded: kept out of the level and the first values
                was, st.armed = st.armed, False
                return was
            if y <= math.sqrt(LOSS_FACTOR) * st.level:
                st.calm += 1
                st.armed = st.armed or st.calm >= LOSS_REARM_POINTS
        if len(st.first) < LOSS_BASELINE_POINTS:
            st.first.append(y)
        st.window.append(y)
        st.seen += 1
        if len(st.window) < LOSS_WINDOW or st.seen % 16 == 0:
            st.relevel()  # every value while the window fills, then every 16th
        return False

    def _new_points(self, stream: Stream) -> list[tuple[str, list[float], list[float]]]:
        """The loss series' points flushed since the last scan (a series whose step
        went back starts again: a new run)."""
        after = {name: st.last_x for name, st in self._series.items()}
        out: list[tuple[str, list[float], list[float]]] = []
        for name, xs, ys, back in stream.tails(is_loss_name, after):
            if back or name not in self._series:
                self._series[name] = _LossState()
            self._series[name].last_x = xs[-1]
            out.append((name, xs, ys))
        return out


def divergence_alert(track: str, jump: LossJump) -> Alert:
    r = jump.value / jump.baseline
    msg = (
        f"Loss divergence at step {jump.step}: {jump.name} = {jump.value:.3g} is {times(r)} "
        f"its level before ({jump.baseline:.3g}; alarm above {LOSS_FACTOR:.0f}x)."
    )
    return Alert(
        "divergence", "error", jump.step, None, msg, REMEDY["divergence"], track, jump.value
    )


def loss_alerts(track: str, jumps: list[LossJump], alerts: list[Alert], told: bool) -> list[Alert]:
    """Divergence alerts for the logged loss's jumps. One story, one alert: a jump seen
    with a fresh explosion alert (in ``alerts``) is added to its message; while the
    track's explosion or non-finite alarm is still raised (``told``) it is not repeated."""
    out: list[Alert] = []
    fresh = [a for a in alerts if a.kind == "explosion"]
    for j in jumps:
        if fresh:
            r = j.value / j.baseline
            fresh[0].message += (
                f" The loss jumped too: {j.name} {j.value:.3g} at step {j.step}, "
                f"{times(r)} its level before."
            )
        elif not told:
            out.append(divergence_alert(track, j))
    return out
