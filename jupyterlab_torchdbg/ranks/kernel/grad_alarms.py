"""A job's gradient alarms: non-finite (naming the rank where it began), explosion and
vanishing, one alarm per event however many ranks see it.

Each worker judges its own reads (rank_signals.py): at its first non-finite sampled step
it diagnoses the cause from its own kept batch (the kernel's diagnosis), and the
kernel's detector raises its explosion and vanishing alerts. Under DDP the all-reduce
gives every rank the same gradients, so one event reaches every rank; here the ranks'
reports of one event are grouped (``Event``: the same kind, and a rank joins when it had
not sampled a step since before the event's first step) and one alarm is raised once
every live rank has been checked past that step (its rows for a non-finite step, its
detector for the others), or after ``WAIT_S`` and the interval the ranks report at:

- non-finite: the ranks whose own batch, forward or loss made it (cause ``input``,
  ``forward``, ``loss``; ``weights`` when not every rank's weights are) are where it
  began: the alarm names the first of them, its finding (which tensor, which module)
  and says the others hold it only through the all-reduce (their own batch and forward
  were checked finite). When every rank's own data is finite, backward made it on one
  of them: which one the averaged gradients cannot tell, and the alarm says so. When
  every rank's weights were already non-finite (an update at an unsampled step), which
  rank's batch began it cannot be told any more.
- explosion / vanishing: one rank, or several with the same all-reduced norm (then
  which rank's batch caused it is not known, and said).

A rank that reports the same event after its alarm was raised (its stride sampled it
later) is added to it. Each alarm names its rank, step, layer and ``ranks``; its
``remedy`` fits the cause and what a rank can do (no Replay, no skip_nonfinite there).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .alarm_fields import CAUSES, KINDS, RaiseAlarm, add_extra, layer_of
from .job import Job
from .norms import norm_value, same_norm
from .rank import Rank
from .words import rank_list

if TYPE_CHECKING:
    from ...protocol import messages as m
    from .alarm_fields import AlarmExtra

#: Seconds an event waits for a rank that has not been checked past its step, on top of
#: the interval that rank reports at (``Rank.report_s``).
WAIT_S = 5.0
#: Events kept per job (the newest).
MAX_EVENTS = 64
#: The causes of a rank's own making.
OWN = ("input", "forward", "loss")

REMEDY = {
    "input": "This rank's batch itself holds NaN/Inf: the data pipeline is the source, not "
    "the model: check how that tensor is built on this rank (its shard of the data, a "
    "corrupt sample, a division by a zero std in normalisation), e.g. assert "
    "torch.isfinite(batch).all() in the dataset.",
    "forward": "Look at that module's forward for log/sqrt/division of values that can "
    "reach 0 or below, an exp or pow that overflows, or an fp16 overflow, with this "
    "rank's batch: clamp the input or add an epsilon there.",
    "loss": "The model's outputs are finite on this rank but its loss is not: look for "
    "log(0) or a division by zero in the loss, and check this rank's targets.",
    "weights": "The weights were already NaN/Inf before this step (an update at an "
    "unsampled step): restore a checkpoint, then clip gradients or lower the learning "
    "rate.",
    "overflow": "The gradients exploded (no NaN source): clip gradients "
    "(torch.nn.utils.clip_grad_norm_) or lower the learning rate.",
    "backward": "The batches and forward passes checked are finite: look at the loss "
    "(log(0), a division by zero, this rank's targets) and at backward (the gradient of "
    "sqrt or norm at 0, pow with a negative exponent, a custom autograd Function, an fp16 "
    "overflow); if the norm was climbing before, clip gradients or lower the learning rate.",
    "unknown": "Run the step in the notebook (one process) to let the kernel diagnose it, "
    "or check each rank's batch with torch.isfinite.",
}


def _fmt(x: float | None) -> str:
    if x is None:
        return "none"
    return f"{x:.3g}" if math.isfinite(x) else str(x)


@dataclass
class Event:
    """One kind of trouble at one step, as the ranks reported it."""

    kind: str
    step: int
    opened: float
    #: rank number -> (the step it saw it at, its finding / alert)
    members: dict[int, tuple[int, Mapping[str, object]]] = field(default_factory=dict)
    alarm: m.RankAlarm | None = None


class GradAlarms:
    """The grouping of one job's per-rank gradient reports into alarms."""

    def __init__(self, job: Job, raise_alarm: RaiseAlarm) -> None:
        self.job = job
        self._raise = raise_alarm
        self.events: list[Event] = []

    def take(self, now: float, rank: Rank | None = None) -> bool:
        """Take every rank's new reports (``rank``: only that one's, the only one that got
        new ones); True when an alarm was raised or changed."""
        changed = False
        for r in self.job.ordered() if rank is None else [rank]:
            while r.findings:
                step, finding = r.findings.popleft()
                changed |= self._add(r, "non_finite", step, finding, now)
            while r.signals:
                signal = r.signals.popleft()
                at = signal.get("step")
                if isinstance(at, int):  # (signal_of's int)
                    changed |= self._add(r, str(signal.get("kind")), at, signal, now)
        return self.check(now) or changed

    def _add(self, r: Rank, kind: str, step: int, report: Mapping[str, object], now: float) -> bool:
        for ev in reversed(self.events):
            if ev.kind != kind or r.number in ev.members:
                continue
            if step == ev.step or (step > ev.step and _last_sampled_before(r, step) < ev.step):
                ev.members[r.number] = (step, report)
                if ev.alarm is not None:
                    self._compose(ev, update=True)
                    return True
                return False
            break
        self.events.append(Event(kind, step, now, {r.number: (step, report)}))
        del self.events[:-MAX_EVENTS]
        return False

    def check(self, now: float) -> bool:
        """Raise the alarm of each event whose every live rank was checked past its step
        (or that waited ``WAIT_S``)."""
        raised = False
        if all(ev.alarm is not None for ev in self.events):
            return False  # nothing waits (checked on every rows message)
        live = [r for r in self.job.ordered() if r.ended is None]
        for ev in self.events:
            if ev.alarm is not None:
                continue
            waiting = [
                r
                for r in live
                if r.number not in ev.members and _checked_through(r, ev.kind) < ev.step
            ]
            # a rank reports every ``report_s`` (6.4 s at 256 ranks): waited for that long
            # on top of WAIT_S, so that a many-rank job's alarm names the right rank
            if waiting and now - ev.opened < WAIT_S + max(r.report_s for r in waiting):
                continue
            self._compose(ev, update=False)
            raised = True
        return raised

    # --- the alarm ----------------------------------------------------------------------

    def _compose(self, ev: Event, update: bool) -> None:
        composed: tuple[int, str | None, str | None, str, str] = (
            self._non_finite(ev) if ev.kind == "non_finite" else self._detector(ev)
        )
        rank, layer, cause, message, remedy = composed
        fields: AlarmExtra = {
            "layer": layer,
            "ranks": sorted(ev.members),
            "remedy": remedy,
        }
        if cause is not None and cause in CAUSES:
            fields["cause"] = CAUSES[cause]
        if update and ev.alarm is not None:
            ev.alarm["rank"] = rank
            ev.alarm["message"] = message[:2000]
            add_extra(ev.alarm, fields)
            return
        kind = KINDS.get(ev.kind)
        if kind is not None:  # (the kinds rows and signal_of let through)
            ev.alarm = self._raise(kind, rank, ev.step, message, once=False, extra=fields)

    def _others_finite(self, ev: Event) -> list[int]:
        """Ranks that are not members and whose norm at the event's step is finite."""
        out = []
        for r in self.job.ordered():
            v = norm_value(r.norms_by_step.get(ev.step))
            if r.number not in ev.members and v is not None and math.isfinite(v):
                out.append(r.number)
        return out

    def _non_finite(self, ev: Event) -> tuple[int, str | None, str, str, str]:
        members = sorted(ev.members.items())
        everyone = [n for n, _ in members]
        # a rank that read it first at a later step (its stride skipped the event's
        # step) saw weights already updated by it: its finding says nothing of its data
        found = {n: f for n, (s, f) in members if s == ev.step}
        late = [(n, s) for n, (s, _) in members if s != ev.step]  # (rank, its step)
        all_weights = all(f["cause"] == "weights" for f in found.values())
        own = [n for n, f in found.items() if f["cause"] in OWN]
        if not all_weights:
            own += [n for n, f in found.items() if f["cause"] == "weights"]
        own.sort()
        clean = [n for n, f in found.items() if n not in own and f["cause"] == "backward"]
        batch_only = [
            n
            for n, f in found.items()
            if n not in own and f["cause"] == "unknown" and f["batch_finite"]
        ]
        unknown = [n for n, f in found.items() if n not in own + clean + batch_only]
        at = f"Non-finite gradient at step {ev.step}"
        others = self._others_finite(ev)
        tail = ""
        if others:
            tail = f" {rank_list(others).capitalize()}: finite gradients at this step."
        for n, step in late:  # what it found at its own step, which is not this one
            tail += (
                f" Rank {n} read it first at step {step} (its stride skipped step "
                f"{ev.step}): {ev.members[n][1]['message']}."
            )
        if own:
            first = own[0]
            f = found[first]
            parts = [f"{at}, from rank {first}: {f['message']}."]
            for n in own[1:]:
                parts.append(f"Rank {n} too: {found[n]['message']}.")
            parts += self._consequences(clean, batch_only, found, origin=True)
            parts += self._not_diagnosed(unknown, found)
            cause = str(f["cause"])
            return first, layer_of(f), cause, " ".join(parts) + tail, REMEDY[cause]
        lowest = min(found)
        f = found[lowest]
        if all_weights:
            message = (
                f"{at} on {rank_list(everyone)}: {f['message']}, on every rank: an update at "
                "an earlier, unsampled step made them non-finite, and which rank's batch "
                "began it cannot be told any more."
            )
            return lowest, layer_of(f), "weights", message + tail, REMEDY["weights"]
        overflow = [n for n, g in found.items() if g["cause"] == "overflow"]
        if overflow:
            g = found[overflow[0]]
            same = " (the same on every rank: their gradients are all-reduced)"
            message = (
                f"{at} on {rank_list(everyone)}: {g['message']}{same if len(everyone) > 1 else ''}."
            )
            return overflow[0], layer_of(g), "overflow", message + tail, REMEDY["overflow"]
        if clean and len(everyone) > 1 and not unknown and not batch_only and not late:
            if all(found[n]["loss_checked"] for n in clean):
                message = (
                    f"{at} on {rank_list(everyone)}: on each, its own batch, forward pass and "
                    "loss are finite, so backward made it on one of them and the all-reduce "
                    "gave it to all; which one cannot be told from the averaged gradients."
                )
            else:
                message = (
                    f"{at} on {rank_list(everyone)}: on each, its own batch and forward pass "
                    "are finite; the loss was not checked (no torch.nn loss module was "
                    "called on the batch), so the loss or backward made it on one of them "
                    "and the all-reduce gave it to all; which one cannot be told from the "
                    "averaged gradients."
                )
            return lowest, layer_of(f), "backward", message + tail, REMEDY["backward"]
        if len(everyone) == 1:
            cause = str(f["cause"])
            said = _clean_words(f) if cause == "backward" else f["message"]
            message = f"{at} on rank {lowest}: {said}." + tail
            return lowest, layer_of(f), cause, message, REMEDY[cause]
        parts = [f"{at} on {rank_list(everyone)}; the ranks' own data checked did not make it."]
        parts += self._consequences(clean, batch_only, found, origin=False)
        parts += self._not_diagnosed(unknown, found)
        cause = "backward" if clean and not unknown and not late else "unknown"
        return lowest, layer_of(f), cause, " ".join(parts) + tail, REMEDY[cause]

    @staticmethod
    def _consequences(
        clean: list[int],
        batch_only: list[int],
        found: dict[int, Mapping[str, object]],
        origin: bool,
    ) -> list[str]:
        """What the other ranks' own data showed; "only through the all-reduce" when
        a rank where it began was found (``origin``)."""
        parts = []
        if clean:
            one = len(clean) == 1
            checked = (
                "batch, forward pass and loss are"
                if all(found[n]["loss_checked"] for n in clean)
                else "batch and forward pass are"
            )
            whose = "its" if one else "their"
            if origin:
                parts.append(
                    f"{rank_list(clean).capitalize()} {'holds' if one else 'hold'} it only "
                    f"through the all-reduce: {whose} own {checked} finite."
                )
            else:
                parts.append(f"{rank_list(clean).capitalize()}: {whose} own {checked} finite.")
        if batch_only:
            why = found[batch_only[0]]["why_not_rerun"] or "not re-run"
            one = len(batch_only) == 1
            parts.append(
                f"{rank_list(batch_only).capitalize()}: {'its' if one else 'their'} own batch "
                f"is finite (the forward was not re-run: {why})."
            )
        return parts

    @staticmethod
    def _not_diagnosed(unknown: list[int], found: dict[int, Mapping[str, object]]) -> list[str]:
        return [f"Rank {n}: {found[n]['message']}." for n in unknown]

    def _all_reduced(self, numbers: list[int]) -> bool:
        """These ranks read equal total norms at every step they all sampled (at least
        one): their gradients are all-reduced (DDP)."""
        ranks = [r for r in self.job.ordered() if r.number in numbers]
        if len(ranks) < 2:
            return False
        common = set.intersection(*(set(r.norms_by_step) for r in ranks))
        if not common:
            return False
        return all(
            same_norm(norm_value(r.norms_by_step[s]), norm_value(ranks[0].norms_by_step[s]))
            for s in common
            for r in ranks[1:]
        )

    def _detector(self, ev: Event) -> tuple[int, str | None, None, str, str]:
        members = sorted(ev.members.items())
        everyone = [n for n, _ in members]
        lowest, (_, first) = members[0]
        remedy = str(first.get("remedy") or "")
        if len(everyone) == 1:
            values = [
                f"rank {r.number} {_fmt(norm_value(r.norms_by_step.get(ev.step)))}"
                for r in self.job.ordered()
                if r.number != lowest and ev.step in r.norms_by_step
            ]
            other = (
                f" The other ranks' total norms at step {ev.step}: {', '.join(values)}."
                if values
                else ""
            )
            return (
                lowest,
                layer_of(first),
                None,
                f"Rank {lowest}: {first['message']}{other}",
                remedy,
            )
        if self._all_reduced(everyone):
            later = [f"rank {n} at step {st}" for n, (st, _) in members if st != ev.step]
            seen = f" (read first by {', '.join(later)}: its stride skipped step {ev.step})"
            message = (
                f"{rank_list(everyone).capitalize()}: {first['message']} Their gradients are "
                "all-reduced (equal norms at every step they all read), so the norm is the "
                "same on every rank: which rank's batch caused it is not known"
                + (seen if later else "")
                + "."
            )
        else:
            rest = " ".join(f"Rank {n}: {m['message']}" for n, (_, m) in members[1:])
            message = (
                f"{rank_list(everyone).capitalize()}. Rank {lowest}: {first['message']} {rest}"
            )
        return lowest, layer_of(first), None, message, remedy


def _clean_words(f: Mapping[str, object]) -> str:
    """A rank's "backward" finding in what was checked (R47): the loss is named finite
    only when a loss module's output on this batch was read."""
    if f["loss_checked"]:
        return "its batch, forward pass and loss are finite: backward made it"
    return (
        "its batch and forward pass are finite; the loss was not checked (no torch.nn "
        "loss module was called on the batch): the loss or backward made it"
    )


def _last_sampled_before(r: Rank, step: int) -> int:
    """The last step before ``step`` at which ``r`` read its norms (0 when none)."""
    return max((s for s in r.norms_by_step if s < step), default=0)


def _checked_through(r: Rank, kind: str) -> int:
    """How far ``r``'s reports of ``kind`` are complete: its sampled rows for a
    non-finite step (diagnosed at the step), its detector's last judged step else."""
    if kind == "non_finite":
        return r.norm_step or 0
    return r.checked
