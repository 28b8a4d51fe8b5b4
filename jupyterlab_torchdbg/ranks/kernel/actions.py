"""All-rank actions: clip, unclip, pause, resume and LR scaling at one agreed step.

Two phases, so DDP replicas never diverge (PROTOCOL.md "Ranks"):

1. ``prepare`` to every live rank with ``at_step`` = the furthest rank's step + a margin
   (``MIN_MARGIN`` steps, or the steps the fastest rank takes in ``MARGIN_S``); each rank
   answers ``ack`` ok when its step counter is still below ``at_step``.
2. All ok within ``ACK_TIMEOUT_S``: ``commit`` to every rank; each applies the action in
   its pre-step hook when its counter reaches ``at_step`` (a rank that gets there first
   holds, up to 5 s, for the commit). Otherwise ``cancel`` to every rank and the request
   is refused with the reason ("rank 1 did not answer within 2 s"); a rank that refused
   only because it had passed the step is asked once more with a later step.

The handler runs on the thread of the panel's request (a subshell while a cell trains)
and waits there for the acks; the acks arrive on the endpoint's thread (``on_ack``).
``ranks_resume`` is one phase: ``resume`` to every rank (a paused rank holds before its
step, so it does not matter when each one gets it).
"""

from __future__ import annotations

import math
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast

from ...kernel.action_args import no_args, only_keys, schema_number
from ...kernel.action_registry import ActionError, ActionRegistry
from .words import rank_list

if TYPE_CHECKING:
    import threading as _threading

    from .alarms import Alarms
    from .job import Job


class Hub(Protocol):
    """What the actions use of the hub (aggregator.py's ``RankHub``)."""

    lock: _threading.RLock
    hang_s: float

    def now(self) -> float: ...

    def running_job(self) -> Job | None: ...

    def alarms_of(self, job: Job) -> Alarms: ...

    def mark_dirty(self) -> None: ...

    def send(self, worker: bytes, msg_type: str, content: Mapping[str, object]) -> None: ...


ACK_TIMEOUT_S = 2.0
MIN_MARGIN = 3
MARGIN_S = 1.0
#: Committed actions remembered for their ``applied`` reports.
KEEP_COMMITTED = 32

#: Panel action -> the worker's ``prepare.action``.
WORKER_ACTION = {
    "ranks_clip": "clip",
    "ranks_unclip": "unclip",
    "ranks_pause": "pause",
    "ranks_scale_lr": "scale_lr",
}


@dataclass
class Prepared:
    action_id: str
    action: str
    #: As its validator (``VALIDATORS``) returned them.
    args: dict[str, object]
    at_step: int
    #: worker id -> rank number, the ranks asked.
    workers: dict[bytes, int]
    job: Job
    acks: dict[bytes, tuple[bool, str | None, int | None]] = field(default_factory=dict)
    applied: set[bytes] = field(default_factory=set)


def _clip_args(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"max_norm"})
    return {"max_norm": schema_number(args, "ranks_clip", "max_norm")}


def _scale_args(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"factor"})
    return {"factor": schema_number(args, "ranks_scale_lr", "factor")}


VALIDATORS: dict[str, Callable[[dict[str, object]], dict[str, object]]] = {
    "ranks_clip": _clip_args,
    "ranks_unclip": no_args,
    "ranks_pause": no_args,
    "ranks_resume": no_args,
    "ranks_scale_lr": _scale_args,
}


class AllRankActions:
    """Runs the ``ranks_*`` actions against the hub's current job."""

    def __init__(self, hub: Hub, timeout: float = ACK_TIMEOUT_S) -> None:
        self._hub = hub
        self.timeout = timeout
        self._cond = threading.Condition()
        self._prepared: Prepared | None = None
        self._committed: OrderedDict[str, Prepared] = OrderedDict()
        self._busy = threading.Lock()

    def register(self, registry: ActionRegistry) -> Callable[[], None]:
        def handler(name: str) -> Callable[[dict[str, object]], dict[str, object]]:
            return lambda args: self.run(name, args, registry.request_id())

        removers = [registry.register(n, v, handler(n)) for n, v in VALIDATORS.items()]

        def remove() -> None:
            for r in removers:
                r()

        return remove

    # --- the request (panel thread) ---------------------------------------------------------

    def run(
        self, action: str, args: dict[str, object], request_id: str | None
    ) -> dict[str, object]:
        if not self._busy.acquire(blocking=False):
            raise ActionError("another all-rank action is being agreed with the ranks", "refused")
        try:
            if action == "ranks_resume":
                return self._resume()
            return self._two_phase(action, args, request_id or uuid.uuid4().hex)
        finally:
            self._busy.release()

    def _job(self) -> Job:
        hub = self._hub
        job = hub.running_job()
        if job is None:
            raise ActionError("no multi-process job is running (no rank has attached)", "refused")
        return job

    def _resume(self) -> dict[str, object]:
        hub = self._hub
        with hub.lock:
            job = self._job()
            live = job.live(hub.now(), hub.hang_s)
            paused = job.paused_at is not None or any(r.phase == "paused" for r in live)
            if not paused and not (job.pending and job.pending["action"] == "pause"):
                raise ActionError("no rank is paused", "refused")
            targets = [(r.worker, r.number) for r in live]
            job.paused_at = None
            if job.pending and job.pending["action"] == "pause":
                job.pending = None
            hub.mark_dirty()
        for worker, _ in targets:
            hub.send(worker, "resume", {})
        return {"ranks": [n for _, n in targets]}

    def _two_phase(
        self, action: str, args: dict[str, object], request_id: str
    ) -> dict[str, object]:
        hub = self._hub
        with hub.lock:
            job = self._job()
            if job.pending is not None:
                p = job.pending
                raise ActionError(
                    f"an all-rank {p['action']} is still pending at step {p['at_step']}", "refused"
                )
            if action == "ranks_pause" and job.paused_at is not None:
                raise ActionError(
                    f"the ranks are already paused at step {job.paused_at}", "refused"
                )
            live = job.live(hub.now(), hub.hang_s)
            if not live:
                raise ActionError(f"every rank of job {job.id} has ended", "refused")
            if action == "ranks_clip" and job.sharded():
                raise ActionError(
                    f"job {job.id}'s gradients are sharded (FSDP): clipping them needs the "
                    "global norm on every rank at one step, which takes a collective the "
                    "extension does not add to your step; clip in your loop instead "
                    "(torch.nn.utils.clip_grad_norm_ handles sharded gradients)",
                    "refused",
                )
            margin = max(MIN_MARGIN, math.ceil(job.fastest_steps_per_s() * MARGIN_S))
            furthest = max(r.step for r in live)
            workers = {r.worker: r.number for r in live}
        prep = self._ask(action, args, furthest + margin, workers, job)
        late = [s for ok, _, s in prep.acks.values() if not ok and s is not None]
        if self._failure(prep) is not None and len(late) == len(self._refusals(prep)) and late:
            self._send_all(prep, "cancel")  # passed the step only: once more, further ahead
            prep = self._ask(action, args, max(late) + 2 * margin, workers, job)
        failure = self._failure(prep)
        if failure is not None:
            self._send_all(prep, "cancel")
            culprits, reason = failure
            with hub.lock:
                alarms = hub.alarms_of(job)
                for n in culprits:
                    alarms.raise_alarm(
                        "action",
                        n,
                        prep.at_step,
                        f"Rank {n} missed the all-rank {WORKER_ACTION[action]} at step "
                        f"{prep.at_step}: {reason}. Nothing was applied on any rank.",
                        once=False,
                    )
                hub.mark_dirty()
            raise ActionError(f"{reason}; nothing applied (cancelled on every rank)", "refused")
        with hub.lock:
            self._committed[prep.action_id] = prep
            while len(self._committed) > KEEP_COMMITTED:
                self._committed.popitem(last=False)
            job.pending = {"action": prep.action, "at_step": prep.at_step, "request_id": request_id}
            hub.mark_dirty()
        self._send_all(prep, "commit")
        return {"at_step": prep.at_step, "ranks": sorted(workers.values())}

    def _ask(
        self,
        action: str,
        args: dict[str, object],
        at_step: int,
        workers: dict[bytes, int],
        job: Job,
    ) -> Prepared:
        prep = Prepared(uuid.uuid4().hex, WORKER_ACTION[action], args, at_step, workers, job)
        with self._cond:
            self._prepared = prep
        content = {
            "action_id": prep.action_id,
            "action": prep.action,
            "args": args,
            "at_step": at_step,
        }
        for worker in workers:
            self._hub.send(worker, "prepare", content)
        with self._cond:
            self._cond.wait_for(lambda: len(prep.acks) >= len(workers), self.timeout)
            self._prepared = None
            prep.acks = dict(prep.acks)  # frozen: a late ack no longer counts
        return prep

    @staticmethod
    def _refusals(prep: Prepared) -> list[bytes]:
        return [w for w, (ok, _, _) in prep.acks.items() if not ok]

    def _failure(self, prep: Prepared) -> tuple[list[int], str] | None:
        silent = sorted(n for w, n in prep.workers.items() if w not in prep.acks)
        if silent:
            return silent, f"{rank_list(silent)} did not answer within {self.timeout:g} s"
        refused = self._refusals(prep)
        if refused:
            w = refused[0]
            why = prep.acks[w][1] or "refused"
            numbers = sorted(prep.workers[x] for x in refused)
            return numbers, f"{rank_list(numbers)} refused: {why}"
        return None

    def _send_all(self, prep: Prepared, msg_type: str) -> None:
        for worker in prep.workers:
            self._hub.send(worker, msg_type, {"action_id": prep.action_id})

    # --- worker reports (endpoint thread) -------------------------------------------------

    def on_ack(self, worker: bytes, content: Mapping[str, object]) -> None:
        with self._cond:
            prep = self._prepared
            if prep is None or content.get("action_id") != prep.action_id:
                return  # late, or for a request already settled
            if worker not in prep.workers:
                return
            reason = content.get("reason")
            step = content.get("step")
            prep.acks[worker] = (
                content.get("ok") is True,
                str(reason)[:200] if reason is not None else None,
                step if isinstance(step, int) and not isinstance(step, bool) else None,
            )
            self._cond.notify_all()

    def on_applied(self, worker: bytes, content: Mapping[str, object]) -> None:
        """A rank applied a committed action (called under the hub's lock)."""
        prep = self._committed.get(str(content.get("action_id")))
        if prep is None or worker not in prep.workers:
            return
        prep.applied.add(worker)
        rank = prep.job.workers.get(worker)
        if rank is not None:
            if prep.action == "clip":
                # a number (or None): ``_clip_args`` checked it against the schema
                rank.clip = cast("float | None", prep.args["max_norm"])
            elif prep.action == "unclip":
                rank.clip = None
            elif prep.action == "scale_lr":
                # a number: ``_scale_args`` checked it against the schema
                rank.lr_scale *= cast("float", prep.args["factor"])
        self.settle(prep.job)

    def settle(self, job: Job) -> None:
        """The pending action is done once every asked rank applied it (or ended or passed
        the step): a pause then shows as ``paused_at``. Under the hub's lock."""
        pending = job.pending
        if pending is None:
            return
        prep = next(
            (
                p
                for p in self._committed.values()
                if p.job is job and p.at_step == pending["at_step"]
            ),
            None,
        )
        if prep is None:
            return
        hub = self._hub
        now = hub.now()
        for worker in prep.workers:
            rank = job.workers.get(worker)
            if worker in prep.applied or rank is None:
                continue
            if rank.state(now, hub.hang_s) in ("exited", "failed", "lost"):
                continue
            if prep.action != "pause" and rank.row_step >= prep.at_step:
                continue
            return
        job.pending = None
        if prep.action == "pause":
            job.paused_at = prep.at_step
        hub.mark_dirty()
