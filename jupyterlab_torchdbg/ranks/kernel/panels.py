"""The panels' side of the hub (aggregator.py): ``ranks`` messages and the flusher.

A small thread, alive while a job runs, ``tick``\\ s every ``FLUSH_S`` (with many ranks,
when its next message or clock look is due: ``flush_s``); a tick runs the clock-driven
alarms (alarms.py) and broadcasts one ``ranks`` message when something changed since
the last one. ``RankHub`` is a ``Panels``: the attributes below are its own.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, cast

from .scale import COMPACT_ABOVE, FLUSH_S, flush_s

if TYPE_CHECKING:
    from ...protocol import messages as m
    from ...protocol.json_types import JsonObject
    from .actions import AllRankActions
    from .alarms import Alarms
    from .exits import ExitWatch
    from .job import Job
    from .rank import Rank


class Sender(Protocol):
    """What the hub needs of the endpoint (ranks/kernel/endpoint.py)."""

    refused: int
    coalesce_ms: int

    def send(self, worker_id: bytes, msg_type: str, content: Mapping[str, object]) -> None: ...


class Panels(ABC):
    """``message``, ``tick`` and the flusher thread of ``RankHub`` (its state)."""

    lock: threading.RLock
    jobs: list[Job]
    endpoint: Sender | None
    transport: str
    hang_s: float
    exits: ExitWatch
    actions: AllRankActions
    messages_sent: int
    _clock: Callable[[], float]
    _broadcast: Callable[[Mapping[str, object]], None]
    _on_error: Callable[[str], None]
    _desync_due: set[int]
    _looked: dict[int, float]
    _held: OrderedDict[bytes, tuple[JsonObject, float]]
    _dirty: bool
    _last_sent: float
    _states_at: float
    _sent_states: object
    #: (job id, rank number -> identity) of what the broadcasts told the panels.
    _sent_identities: tuple[int | None, dict[int, m.RankIdentity]]
    _threaded: bool
    _stop: threading.Event
    _nudge: threading.Event
    _thread: threading.Thread | None

    @abstractmethod
    def alarms_of(self, job: Job) -> Alarms:
        """The job's alarms (made on first use)."""

    @abstractmethod
    def _forget_ended(self) -> None:
        """Drop the ended jobs over ``KEEP_ENDED``."""

    @abstractmethod
    def _admit_held(self, now: float) -> None:
        """Admit the refused hellos whose slot is free now."""

    # --- the panels' messages ----------------------------------------------------------------

    def message(
        self,
        replay: bool = False,
        delta: bool = False,
        now: float | None = None,
        read: list[str] | None = None,
    ) -> m.Ranks:
        """One ``ranks`` message of the current (or last) job. Takes the new points.

        ``delta`` (the flusher's broadcasts): above ``COMPACT_ABOVE`` ranks, a rank's
        identity goes only when the panels do not have it (a new rank, a new job, a
        changed identity: ``_sent_identities``); every other message (``replay``: the
        snapshot a panel gets when it opens or asks, PROTOCOL.md) has every identity.
        ``now`` and ``read`` (the ranks' states at ``now``, in rank order): the tick's.
        """
        with self.lock:
            now = self._clock() if now is None else now
            job = self.jobs[-1] if self.jobs else None
            ep = self.endpoint
            msg: m.Ranks = {
                "method": "ranks",
                "replay": replay,
                "job": None,
                "ranks": [],
                "points": [],
                "alarms": [],
                "endpoint": {
                    # the endpoint's (endpoint.py: ``ipc`` or ``tcp``)
                    "transport": cast("m.RanksEndpointTransport", self.transport)
                    if ep is not None
                    else "off",
                    "refused": int(getattr(ep, "refused", 0)),
                },
            }
            if job is None:
                return msg
            self._compare_due(now)
            msg["job"] = job.to_json()
            # many ranks: each rank's newest point only (its chart gets a point per message)
            few = len(job.ranks) <= COMPACT_ABOVE
            known = None
            if delta and not few:
                sent = self._sent_identities
                if sent[0] != job.id:
                    sent = self._sent_identities = (job.id, {})
                known = sent[1]
            elif delta:
                self._sent_identities = (None, {})
            msg["ranks"] = job.states(now, self.hang_s, known=known, read=read)
            msg["points"] = job.points(replay, newest=not few)
            # each a RankAlarm (alarms.py builds them; typed there as dicts)
            msg["alarms"] = cast("list[m.RankAlarm]", list(self.alarms_of(job).items))
            return msg

    def snapshot_messages(self) -> list[m.Ranks]:
        """For a panel that connects: the job with every kept point."""
        return [self.message(replay=True)]

    def tick(self) -> bool:
        """One look of the flusher: clock alarms, job end, then at most one ``ranks``
        message. Returns False when no job runs any more (the thread may end)."""
        msg = None
        with self.lock:
            now = self._clock()
            running = [j for j in self.jobs if not j.ended]
            # each rank's state at ``now``, read once by the clock's checks and the message
            read_at: dict[int, list[tuple[Rank, str]]] = {}
            for running_job in running:
                # the clock's checks read every rank: with many, once per flush interval
                looked = self._looked.get(running_job.id, -1e18)
                if now - looked >= flush_s(len(running_job.ranks)) - 1e-9:
                    self._looked[running_job.id] = now
                    if self.exits.check(running_job, self.alarms_of(running_job), now):
                        self._dirty = True
                    pairs = [(r, r.state(now, self.hang_s)) for r in running_job.ordered()]
                    read_at[running_job.id] = pairs
                    if self.alarms_of(running_job).check_time(now, self.hang_s, pairs):
                        self._dirty = True
                self.actions.settle(running_job)
                if running_job.update_ended(now, self.hang_s):
                    self._dirty = True
                    self._forget_ended()
            if self._held:
                self._admit_held(now)
                read_at.clear()  # a rank may have joined
            job = self.jobs[-1] if self.jobs else None
            every = flush_s(len(job.ranks)) if job is not None else FLUSH_S
            due = now - self._last_sent >= every - 1e-9
            if due and self._compare_due(now):
                self._dirty = True
            states: list[tuple[int, str, str]] = []
            if job is not None and due and (self._dirty or now - self._states_at >= every):
                # a state the clock changed (late, lost): read only when a message may go,
                # and without news at most once per interval (every rank is read)
                self._states_at = now
                seen = read_at.get(job.id)
                if seen is None:
                    seen = [(r, r.state(now, self.hang_s)) for r in job.ordered()]
                states = [(r.number, state, r.phase) for r, state in seen]
                if (job.id, states) != self._sent_states:
                    self._dirty = True
            if self._dirty and due:
                read = [s for _, s, _ in states] if states else None
                msg = self.message(delta=True, now=now, read=read)
                self._dirty = False
                self._last_sent = now
                if job is not None:
                    self._sent_states = (job.id, states)
                self.messages_sent += 1
            alive = any(not j.ended for j in self.jobs) or self._dirty or bool(self._held)
        if msg is not None:
            self._broadcast(msg)
        return alive

    def _compare_due(self, now: float) -> bool:
        """The desync check of the jobs that got sampled norms since the last look."""
        raised = 0
        for job in self.jobs:
            if job.id in self._desync_due:
                raised += self.alarms_of(job).check_desync(now, self.hang_s)
        self._desync_due.clear()
        return raised > 0

    def _ensure_thread(self) -> None:
        if not self._threaded or self._stop.is_set():
            return
        thread = self._thread
        if thread is not None and thread.is_alive():
            return
        thread = threading.Thread(target=self._run, name="torchdbg-ranks-flush", daemon=True)
        self._thread = thread
        thread.start()

    def _run(self) -> None:
        wait = FLUSH_S
        while True:
            self._nudge.wait(wait)
            if self._stop.is_set():
                return
            self._nudge.clear()
            try:
                if not self.tick():
                    return
                wait = self._wait_s()
            except Exception:
                self._on_error("ranks:tick")
                wait = FLUSH_S

    def _wait_s(self) -> float:
        """How long the flusher sleeps: ``FLUSH_S``; with many ranks, until its next
        message or clock look may be due (both spaced by ``flush_s``), rather than ten
        wake-ups a second for nothing (issue #25). ``FLUSH_S`` while an action waits or
        a refused hello is held."""
        with self.lock:
            job = self.jobs[-1] if self.jobs else None
            if job is None or self._held or len(job.ranks) <= COMPACT_ABOVE:
                return FLUSH_S
            every = flush_s(len(job.ranks))
            due = self._last_sent + every
            for j in self.jobs:
                if j.ended:
                    continue
                if j.pending is not None or len(j.ranks) <= COMPACT_ABOVE:
                    return FLUSH_S
                due = min(due, self._looked.get(j.id, -1e18) + flush_s(len(j.ranks)))
            return min(every, max(FLUSH_S, due - self._clock()))
