"""The multi-process alarms of a job (PROTOCOL.md "Ranks", ``RankAlarm``).

- desync: at a sampled step every rank has passed, a rank's total gradient norm differs
  from the majority's by more than ``DESYNC_RTOL`` (NaN against a number counts). After
  DDP's all-reduce every replica holds the same gradients, so a difference means that
  rank's replica diverged. The majority is the largest group of equal norms; on a tie the
  group holding the lowest rank (2 ranks: rank 0 is the reference). From ``layers`` at
  that step, the first layer whose norm differs. Once per rank per job.
- straggler: over its last >= ``STRAGGLER_STEPS`` steps a rank's own time per step (step
  time x the share its training thread spent outside torch's waits) is more than
  ``STRAGGLER_FACTOR`` x the median of the other ranks' and ``STRAGGLER_MIN_S`` more.
- hang: no rank stepped for ``hang_s``: the ranks in their own code (``user``) are the
  stuck ones, the others wait in a collective; the alarm carries the stuck rank's stack
  (taken in the worker), its own frames first. Once per rank per hang. With the ranks'
  collectives (torch's flight recorder, hang_diag.py, R57): the collective the others
  wait in (op, seq, group, shapes), the ranks that never entered it (the stuck ones),
  and the ranks' stacks merged by their innermost own frame.
- failed: a worker's exception or a failed exit; lost: no message for ``LOST_S``.
- action: a rank refused or did not answer an all-rank action (``actions.py``).
- non_finite / explosion / vanishing: judged in each rank (its own batch diagnosed at a
  non-finite step), one alarm per event across the ranks (``grad_alarms.py``).

Each alarm names the rank and the figures in one human sentence.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ...kernel.thread_stacks import user_first
from .alarm_fields import add_extra
from .grad_alarms import GradAlarms
from .hang_diag import diagnose, hang_extra
from .job import Job
from .norms import norm_value, same_norm
from .rank import TERMINAL, Rank
from .words import rank_list

if TYPE_CHECKING:
    from ...protocol import messages as m
    from .alarm_fields import AlarmExtra

STRAGGLER_STEPS = 5
STRAGGLER_FACTOR = 1.5
STRAGGLER_MIN_S = 0.020
#: The job's alarms kept (the first is the root cause: the oldest are kept).
MAX_ALARMS = 50
#: A hang alarm waits this long past the threshold for the stuck rank's stack.
STACK_GRACE_S = 3.0
#: A rank's own failure this soon after a collective's failure on another is its cause.
ROOT_WINDOW_S = 5.0
#: Where a failure that is a consequence of another rank's comes from (the innermost
#: frame): torch's collectives and the backward pass that runs DDP's all-reduce.
COLLECTIVE_DIRS = ("torch/distributed/", "torch/nn/parallel/", "torch/autograd/")


def _fmt(x: float | None) -> str:
    if x is None:
        return "none"
    return f"{x:.6g}" if math.isfinite(x) else str(x)


def _ms(s: float) -> str:
    return f"{s * 1000:.0f} ms"


class Alarms:
    """The alarms of one job, and the checks that raise them."""

    def __init__(self, job: Job, wall: Callable[[], float]) -> None:
        self.job = job
        self._wall = wall
        self.items: list[m.RankAlarm] = []
        self._raised: set[tuple[str, int]] = set()
        self._count = 0
        #: Ids of failures that came out of a collective (consequences).
        self._secondary: set[str] = set()
        #: Non-finite, explosion and vanishing, judged in the ranks (grad_alarms.py).
        self.grads = GradAlarms(job, self.raise_alarm)

    def raise_alarm(
        self,
        kind: m.RankAlarmKind,
        rank: int,
        step: int | None,
        message: str,
        *,
        layer: str | None = None,
        stack: list[str] | None = None,
        stack_user: int | None = None,
        once: bool = True,
        extra: AlarmExtra | None = None,
    ) -> m.RankAlarm | None:
        """Add one alarm (once per rank and kind unless ``once`` is False); ``extra``:
        the gradient alarms' ``layer``, ``cause``, ``ranks``, ``remedy``."""
        if once and (kind, rank) in self._raised:
            return None
        self._raised.add((kind, rank))
        self._count += 1
        alarm: m.RankAlarm = {
            "id": f"{self.job.id}-{self._count}",
            "kind": kind,
            "rank": rank,
            "step": step,
            "time": round(self._wall(), 3),
            "message": message[:2000],
            "stack": [s[:1000] for s in (stack or [])[-64:]],
        }
        if kind == "desync":
            alarm["layer"] = layer
        if extra:
            add_extra(alarm, extra)
        if stack_user is not None:
            alarm["stack_user"] = min(stack_user, len(alarm["stack"]))
        if len(self.items) < MAX_ALARMS:
            self.items.append(alarm)
        return alarm

    # --- desync -------------------------------------------------------------------------

    def check_desync(self, now: float, hang_s: float, live: list[Rank] | None = None) -> int:
        """Compare the sampled steps every rank has reported (a live rank's rows come in
        step order; an ended rank's are all in); returns the alarms raised. ``live``: the
        running ranks when the caller already read them (``check_time``)."""
        job = self.job
        ranks = job.ordered()
        if len(ranks) < max(2, job.world_size):
            return 0  # not every rank has attached yet: its early steps are still kept
        if job.sharded():
            # FSDP: each rank reads its own shards, so the norms differ by design; the
            # job's global norm is combined from them instead (Job.global_norm)
            job.checked_upto = max(r.row_step for r in ranks)
            return 0
        live = job.live(now, hang_s) if live is None else live
        upto = min(r.row_step for r in live) if live else max(r.row_step for r in ranks)
        if upto <= job.checked_upto:
            return 0
        # each rank's sampled steps are kept in step order (its rows come in step order):
        # read from its newest back to the last compared one, not all KEEP_STEPS of them
        done = job.checked_upto
        found: set[int] = set()
        for r in ranks:
            for s in reversed(r.norms_by_step):
                if s <= done:
                    break
                if s <= upto:
                    found.add(s)
        steps = sorted(found)
        raised = 0
        for step in steps:
            raised += self._compare(step)
        job.checked_upto = upto
        return raised

    def _compare(self, step: int) -> int:
        have = [
            (r, norm_value(r.norms_by_step[step]))
            for r in self.job.ordered()
            if step in r.norms_by_step
        ]
        if len(have) < 2:
            return 0
        groups: list[list[tuple[Rank, float | None]]] = []
        for r, v in have:
            for g in groups:
                if same_norm(g[0][1], v):
                    g.append((r, v))
                    break
            else:
                groups.append([(r, v)])
        if len(groups) == 1:
            return 0
        # the largest group; on a tie the one holding the lowest rank (groups are in rank order)
        majority = max(groups, key=lambda g: (len(g), -g[0][0].number))
        ref_rank, ref = majority[0]
        raised = 0
        for g in groups:
            if g is majority:
                continue
            for r, v in g:
                if ("desync", r.number) in self._raised:
                    continue  # raised once per rank (raise_alarm): no sentence to write
                layer = _first_layer_differing(r, ref_rank, step)
                rel = (
                    abs(v - ref) / max(abs(ref), 1e-30)
                    if v is not None and ref is not None and math.isfinite(v) and math.isfinite(ref)
                    else math.inf
                )
                others = [m.number for m, _ in majority]
                message = (
                    f"Desync: rank {r.number}'s gradient norm at step {step} is {_fmt(v)}, "
                    f"{rank_list(others)} {'has' if len(others) == 1 else 'have'} {_fmt(ref)} "
                    f"(relative difference {rel:.2g}). After the all-reduce every replica "
                    "holds the same gradients: this rank's replica has diverged"
                    + (f"; the first layer that differs is {layer}." if layer else ".")
                )
                if self.raise_alarm("desync", r.number, step, message, layer=layer):
                    raised += 1
        return raised

    # --- straggler ----------------------------------------------------------------------

    def check_stragglers(self, now: float, hang_s: float, live: list[Rank] | None = None) -> int:
        running = self.job.live(now, hang_s) if live is None else live
        live = [r for r in running if len(r.owns) >= STRAGGLER_STEPS]
        if len(live) < 2:
            return 0
        raised = 0
        # each rank's own time read once, sorted once: the others' median of each rank
        # without re-reading them (hundreds of ranks, issue #25)
        times = [(r, r.own_time(last=2 * STRAGGLER_STEPS)) for r in live]
        known = sorted(t for _, t in times if t is not None)
        for r, mine in times:
            if mine is None or len(known) < 2:
                continue
            theirs = median_without(known, mine)
            if mine <= STRAGGLER_FACTOR * theirs or mine - theirs <= STRAGGLER_MIN_S:
                continue
            n = min(len(r.owns), 2 * STRAGGLER_STEPS)
            message = (
                f"Straggler: rank {r.number} spends {_ms(mine)} of its own work per step, "
                f"the other ranks {_ms(theirs)} (median of the last {n} steps, "
                f"{mine / max(theirs, 1e-9):.1f}x): the others wait for it in every "
                "all-reduce. Look at its data loading or its host/device."
            )
            if self.raise_alarm("straggler", r.number, r.step, message):
                raised += 1
        return raised

    # --- hang ---------------------------------------------------------------------------

    def check_hang(self, now: float, hang_s: float, live: list[Rank] | None = None) -> int:
        job = self.job
        active = [r for r in (job.live(now, hang_s) if live is None else live) if r.step > 0]
        if not active or any(r.phase == "paused" for r in active):
            return 0
        sinces = [r.since_step(now) or 0.0 for r in active]
        since = min(sinces)
        if since < hang_s:
            # stepping again: a later hang is a new one
            self._raised = {k for k in self._raised if k[0] != "hang"}
            return 0
        views = [(r.number, r.collective, r.stack, r.stack_user) for r in active]
        if (
            any(c is not None for _, c, _, _ in views)
            and any(c is None for _, c, _, _ in views)
            and since < hang_s + STACK_GRACE_S
        ):
            return 0  # the others' collectives are on the way (R57)
        diag = diagnose(views)
        stuck = [r for r in active if r.phase == "user"]
        waiting = [r for r in active if r.phase == "torch_wait"]
        if diag is not None and diag["missing"]:  # the ranks that never entered it
            stuck = [r for r in active if r.number in diag["missing"]]
            waiting = [r for r in active if r.number in diag["collective"]["ranks_in"]]
        extra, told = hang_extra(views, diag)
        if not stuck:  # every rank waits inside torch: the one behind is the suspect
            stuck = [min(active, key=lambda r: (r.step, r.number))]
            waiting = [r for r in waiting if r is not stuck[0]]
        raised = 0
        for r in stuck:
            if r.stack is None and since < hang_s + STACK_GRACE_S:
                continue  # its heartbeat with the stack is on the way
            verb = "waits" if len(waiting) == 1 else "wait"
            others = (
                f" while {rank_list([w.number for w in waiting])} {verb} in a collective"
                if waiting
                else ""
            )
            stack, n_user, where = _stuck_at(r)
            message = (
                f"Hang: rank {r.number} has not stepped for {since:.0f} s (its last step "
                f"was {r.step}){others}.{where}.{told}"
            )
            if self.raise_alarm(
                "hang", r.number, r.step, message, stack=stack, stack_user=n_user, extra=extra
            ):
                raised += 1
        return raised

    # --- failed / lost ------------------------------------------------------------------

    def failed(self, r: Rank, what: str, *, secondary: bool = False) -> None:
        """A rank failed. ``secondary``: its exception came out of a collective (its peer
        went away): a consequence, so a rank failing on its own within ``ROOT_WINDOW_S``
        is listed before it, whichever message arrived first (the first alarm is the
        root cause)."""
        ident = r.identity
        because = " (probably because another rank failed first)" if secondary else ""
        alarm = self.raise_alarm(
            "failed",
            r.number,
            r.step,
            f"Rank {r.number} (pid {ident.get('pid')} on {ident.get('host') or 'this host'}) "
            f"failed at step {r.step}: {what}"[:1900]
            + because,
        )
        if alarm is None or alarm not in self.items:
            return
        if secondary:
            self._secondary.add(alarm["id"])
            return
        for i, other in enumerate(self.items[:-1]):
            if other["id"] in self._secondary and alarm["time"] - other["time"] <= ROOT_WINDOW_S:
                self.items.remove(alarm)
                self.items.insert(i, alarm)
                return

    def check_lost(self, now: float, hang_s: float, lost: list[Rank] | None = None) -> int:
        raised = 0
        if lost is None:
            lost = [r for r in self.job.ordered() if r.state(now, hang_s) == "lost"]
        for r in lost:
            if r.ended is None:
                message = (
                    f"Lost: rank {r.number} (pid {r.identity.get('pid')}) has sent nothing "
                    f"for {now - r.seen_at:.0f} s (threshold {r.lost_s:.0f} s; last step "
                    f"{r.step}): its process was killed or cannot reach the kernel."
                )
                if self.raise_alarm("lost", r.number, r.step, message):
                    raised += 1
        return raised

    def check_time(
        self, now: float, hang_s: float, states: list[tuple[Rank, str]] | None = None
    ) -> int:
        """The checks that depend on the clock (run by the aggregator's tick). Every rank's
        state is read once for all of them (hundreds of ranks, issue #25; ``states``: the
        job's ranks in order with their states at ``now``, when the caller read them): the
        checks raise alarms and change no rank."""
        if states is None:
            states = [(r, r.state(now, hang_s)) for r in self.job.ordered()]
        live = [r for r, state in states if state not in TERMINAL]
        lost = [r for r, state in states if state == "lost"]
        return (
            int(self.grads.check(now))
            + self.check_desync(now, hang_s, live)
            + self.check_lost(now, hang_s, lost)
            + self.check_hang(now, hang_s, live)
            + self.check_stragglers(now, hang_s, live)
        )


def _stuck_at(r: Rank) -> tuple[list[str] | None, int | None, str]:
    """A stuck rank's stack with the user's frames first (as the exception view reads a
    traceback), how many are the user's, and where it is: its innermost user frame,
    and the innermost frame when that is the library's (where it waits)."""
    if not r.stack:
        return r.stack, None, " Its stack did not arrive"
    if r.stack_user is None:
        return r.stack, None, f" It is in {r.stack[-1]}"
    stack, n_user = user_first(r.stack, r.stack_user)
    inner = r.stack[-1]
    if n_user == 0:
        return stack, 0, f" It is in {inner} (no frame of its own code on the stack)"
    mine = stack[n_user - 1]
    where = f" It is in {mine}"
    if not r.stack_user[-1]:
        where += f", inside {inner}"
    return stack, n_user, where


def from_collective(content: Mapping[str, object]) -> bool:
    """A worker's exception raised inside a collective (a peer went away), not its own."""
    frames = content.get("frames")
    last = frames[-1] if isinstance(frames, list) and frames else None
    where = str(last.get("file", "")) if isinstance(last, dict) else ""
    info = content.get("exception")
    kind = str(info.get("type", "")) if isinstance(info, dict) else ""
    return kind == "DistBackendError" or any(d in where.replace("\\", "/") for d in COLLECTIVE_DIRS)


def _first_layer_differing(r: Rank, ref: Rank, step: int) -> str | None:
    mine, theirs = r.layers_at(step), ref.layers_at(step)
    if mine is None or theirs is None:
        return None
    values = dict(zip(mine["names"], mine["norms"], strict=False))
    for name, v in zip(theirs["names"], theirs["norms"], strict=False):
        if name in values and not same_norm(norm_value(values[name]), norm_value(v)):
            return str(name)
    return None


def median_without(ordered: list[float], value: float) -> float:
    """The median of ``ordered`` (sorted) with one occurrence of ``value`` left out:
    ``statistics.median`` of the others, without building them."""
    i = bisect.bisect_left(ordered, value)
    n = len(ordered) - 1

    def at(k: int) -> float:
        return ordered[k] if k < i else ordered[k + 1]

    if n % 2:
        return at(n // 2)
    return (at(n // 2 - 1) + at(n // 2)) / 2
