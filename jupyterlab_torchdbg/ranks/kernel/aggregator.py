"""The kernel side of multi-process training: workers in, ``ranks`` messages out.

``RankHub`` is fed every verified worker message by the endpoint's thread
(``on_message``). A ``hello`` puts the worker into the job of its ``job_key`` (a new job
when none runs under that key), gets a ``config`` back and sets the endpoint's read
pause (scale.py); ``rows`` and ``heartbeat`` update its rank (job.py); an ``exception``
becomes the panel's ``exception`` message with the rank (broadcast at once) and a
``failed`` alarm; ``ack`` / ``applied`` go to the all-rank actions (actions.py).

What the panels see is coalesced (panels.py: the flusher thread and its ``ranks``
messages, at most 10 a second, fewer with many ranks, one more when the job ends). A
panel that connects gets the message with ``replay: true`` (every kept point) after
``runs``. All of it under one lock; nothing here raises into a
worker's message loop or the user's cell (errors are counted).

Bounded and true (R56): only the newest ``KEEP_ENDED`` ended jobs are kept, the older
ones forgotten with their keys, workers, alarms and cells; a rank whose process ended
without a word is ended by what the kernel can see of its exit (exits.py: ``failed``
with the signal that killed it); a rank's slot belongs to the worker (connection) whose
hello took it: another worker's hello for it is refused with a reason and counted while
the holder lives (``refusals``), and admitted once the holder has ended or is lost.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ...protocol.json_types import JsonObject
from . import panel_exception
from .actions import AllRankActions
from .alarms import Alarms, from_collective
from .exits import ExitWatch
from .job import Job, valid_identity
from .panels import Panels, Sender
from .rank import LOST_S, Rank
from .scale import cadence, coalesce_ms

if TYPE_CHECKING:
    from ...protocol import messages as m

#: Ended jobs kept: the newest (the panel shows the last job; a panel that connects gets
#: it replayed). Older ones are forgotten with their keys and workers (R44, R56).
KEEP_ENDED = 4
#: Jobs kept at most, running or not (a flood of job keys drops the oldest).
MAX_JOBS = 16
#: Refused hellos kept, to be admitted once their slot is free (the oldest dropped).
MAX_HELD = 64


def _hang_s() -> float:
    """No step for this long is a hang: 10 s, or ``$TORCHDBG_HANG_S`` (sent to each
    worker in ``config``)."""
    try:
        value = float(os.environ.get("TORCHDBG_HANG_S", "") or 10.0)
    except ValueError:
        return 10.0
    return value if 0.5 <= value <= 86400 else 10.0


def world_of(job_key: str) -> str:
    """The rendezvous of a ``MASTER_ADDR:MASTER_PORT:WORLD_SIZE`` key without the world
    size: a worker's hello before its process group was up (world 1) is in the job."""
    head, sep, tail = job_key.rpartition(":")
    return head if sep and tail.isdigit() and ":" in head else job_key


class RankHub(Panels):
    """Jobs, their ranks and alarms, and the ``ranks`` messages (module docstring)."""

    def __init__(
        self,
        broadcast: Callable[[Mapping[str, object]], None],
        on_error: Callable[[str], None],
        session_id: str = "ranks",
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        transport: str = "ipc",
        ack_timeout: float | None = None,
        threaded: bool = True,
    ) -> None:
        self._broadcast = broadcast
        self._on_error = on_error
        self._session = session_id[:12]
        self._clock = clock
        self._wall = wall
        self.transport = transport
        self.lock = threading.RLock()
        self.hang_s = _hang_s()
        self.endpoint: Sender | None = None
        #: The cell-event handlers (pre_run_cell, post_run_cell) the extension calls
        #: (attach.py); None once unloaded.
        self.cell_events: tuple[Callable[[object], None], Callable[[object], None]] | None = None
        self._states_at = -1e18  # when the flusher last read every rank's state (tick)
        self.jobs: list[Job] = []
        self._job_ids = 0
        self._by_key: dict[str, Job] = {}
        self._by_worker: dict[bytes, Job] = {}
        self._alarms: dict[int, Alarms] = {}
        #: How the ranks' processes ended (exits.py); mp_wrap's join wrapper tells it.
        self.exits = ExitWatch()
        #: Hellos refused because another live worker holds the slot, and why (bounded).
        self.refused_hellos = 0
        self.refusals: deque[str] = deque(maxlen=16)
        #: worker -> (its refused hello, when it was last heard).
        self._held: OrderedDict[bytes, tuple[JsonObject, float]] = OrderedDict()
        self.actions = (
            AllRankActions(self) if ack_timeout is None else AllRankActions(self, ack_timeout)
        )
        self._dirty = False
        #: Jobs with sampled norms not compared yet (checked once per look: reads all ranks).
        self._desync_due: set[int] = set()
        #: job id -> when the tick last ran its clock checks.
        self._looked: dict[int, float] = {}
        self._last_sent = -1e18
        self._sent_states: object = None
        self._sent_identities: tuple[int | None, dict[int, m.RankIdentity]] = (None, {})
        self.messages_sent = 0
        self.worker_messages = 0
        self._exceptions = 0
        #: The cell that runs now / ran last (the job's cell in a worker's exception).
        self.cell: tuple[str | None, int | None] = (None, None)
        self._job_cell: dict[int, tuple[str | None, int | None]] = {}
        #: (job id, exception message) of the rank that failed first on its own.
        self._root_exception: tuple[int, m.Exception] | None = None
        self._threaded = threaded
        #: Called when torch gets imported in the kernel (worker_env.torch_imported).
        self.on_torch: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        #: Wakes the flusher before its wait is over (a new job, an action, close).
        self._nudge = threading.Event()

    def torch_imported(self) -> None:
        """The extension saw ``import torch`` (its one watcher): patch the launcher."""
        if self.on_torch is not None:
            self.on_torch()

    # --- what actions.py uses ---------------------------------------------------------------

    def now(self) -> float:
        return self._clock()

    def running_job(self) -> Job | None:
        """The newest job, while it runs (the one the panel shows and actions act on)."""
        with self.lock:
            job = self.jobs[-1] if self.jobs else None
            return job if job is not None and not job.ended else None

    def alarms_of(self, job: Job) -> Alarms:
        alarms = self._alarms.get(job.id)
        if alarms is None:
            alarms = self._alarms[job.id] = Alarms(job, self._wall)
        return alarms

    def mark_dirty(self) -> None:
        self._dirty = True
        self._nudge.set()  # an action pending: the flusher looks every FLUSH_S again

    def send(self, worker: bytes, msg_type: str, content: Mapping[str, object]) -> None:
        ep = self.endpoint
        if ep is None:
            return
        try:
            ep.send(worker, msg_type, content)
        except Exception:
            self._on_error("ranks:send")

    # --- worker messages (the endpoint's thread) ------------------------------------------

    def on_message(self, worker: bytes, msg_type: str, content: JsonObject) -> None:
        try:
            self._dispatch(worker, msg_type, content if isinstance(content, dict) else {})
        except Exception:
            self._on_error(f"ranks:{msg_type}"[:40])

    def _dispatch(self, worker: bytes, msg_type: str, content: JsonObject) -> None:
        self.worker_messages += 1
        if msg_type == "ack":
            self.actions.on_ack(worker, content)
            return
        now = self._clock()
        exception: m.Exception | None = None
        with self.lock:
            if msg_type == "hello":
                self._hello(worker, content, now)
            else:
                job = self._by_worker.get(worker)
                rank = job.workers.get(worker) if job is not None else None
                if job is None or rank is None:
                    held = self._held.get(worker)
                    if held is not None:  # a refused worker speaks: not accepted
                        self.refused_hellos += 1
                        self._held[worker] = (held[0], now)
                        if msg_type == "bye":
                            del self._held[worker]  # it ended: never admitted
                    else:
                        self._on_error("ranks:unknown_worker")
                    return
                rank.seen_at = now
                if msg_type == "rows":
                    if rank.add_rows(content, now):
                        self._desync_due.add(job.id)  # compared on the next look (tick)
                    self.alarms_of(job).grads.take(now, rank)
                    self._dirty = True
                elif msg_type == "heartbeat":
                    self._dirty |= rank.heartbeat(content, now)
                elif msg_type == "applied":
                    self.actions.on_applied(worker, content)
                    self._dirty = True
                elif msg_type == "exception":
                    exception = self._exception(job, worker, content)
                elif msg_type == "bye":
                    state = "failed" if content.get("state") == "failed" else "exited"
                    if rank.ended != "failed":
                        rank.ended = state
                    if state == "failed":
                        self.alarms_of(job).failed(rank, "its process exited with an error")
                    self._dirty = True
                if msg_type in ("bye", "exception"):  # its rows are all in
                    self._desync_due.discard(job.id)
                    self.alarms_of(job).check_desync(now, self.hang_s)
                    self.alarms_of(job).grads.check(now)  # it no longer holds an event
                # a rank that has not ended has just been heard: the job runs on (the
                # flusher's look ends a job whose ranks went silent)
                if rank.ended is not None and job.update_ended(now, self.hang_s):
                    self._dirty = True
                    self._forget_ended()
        if exception is not None:
            self._broadcast(exception)
        self._ensure_thread()

    def _hello(self, worker: bytes, content: JsonObject, now: float) -> None:
        identity = valid_identity(content.get("identity"))
        if identity is None:
            self._on_error("ranks:hello")
            return
        key = world_of(str(content.get("job_key") or "")[:256])
        old = self._by_worker.get(worker)
        job = self._by_key.get(key)
        if job is not None and not job.ended:
            holder = job.holder(identity["rank"], worker, now, self.hang_s)
            if holder is not None:
                self._refuse(worker, content, holder, now)
                return
        self._held.pop(worker, None)
        if job is None or job.ended:
            self._job_ids += 1
            job = Job(self._job_ids, key, round(self._wall(), 3), self.transport)
            self.jobs.append(job)
            self._by_key[key] = job
            self._job_cell[job.id] = self.cell
            self._forget_ended()
            self._nudge.set()
        if old is not None and old is not job:
            old.remove(worker)
        self._by_worker[worker] = job
        rank = job.add(worker, identity, now, str(content.get("torch", ""))[:64])
        self.exits.attached(dict(identity))
        self._dirty = True
        asked = cadence(job.world_size)
        if self.endpoint is not None:
            self.endpoint.coalesce_ms = coalesce_ms(job.world_size)
        rank.report_s = asked.get("rows_s", 0.1)
        self.send(worker, "config", {"hang_s": self.hang_s, **asked})

    def _refuse(self, worker: bytes, content: JsonObject, holder: Rank, now: float) -> None:
        """A hello for a slot a live worker holds: refused (counted, with the reason,
        told to the worker), kept to be admitted once the holder ends."""
        ident = holder.identity
        reason = (
            f"rank {holder.number} is held by pid {ident.get('pid')} on "
            f"{ident.get('host') or 'this host'}, whose worker is alive"
        )
        self.refused_hellos += 1
        self.refusals.append(reason)
        self._held[worker] = (content, now)
        self._held.move_to_end(worker)
        while len(self._held) > MAX_HELD:
            self._held.popitem(last=False)
        self.send(worker, "refused", {"reason": reason})

    def _admit_held(self, now: float) -> None:
        """Refused hellos whose slot is free now (its holder ended or is lost), from
        workers still heard (one silent for ``LOST_S`` or gone with a ``bye`` is dropped)."""
        for worker, (content, heard) in list(self._held.items()):
            key = world_of(str(content.get("job_key") or "")[:256])
            job = self._by_key.get(key)
            identity = valid_identity(content.get("identity"))
            if identity is None or now - heard >= LOST_S:
                self._held.pop(worker, None)
            elif (
                job is None
                or job.ended
                or not job.holder(identity["rank"], worker, now, self.hang_s)
            ):
                self._held.pop(worker, None)
                self._hello(worker, content, now)

    def _forget_ended(self) -> None:
        """Keep the newest ``KEEP_ENDED`` ended jobs (and at most ``MAX_JOBS`` jobs)."""
        ended = [j for j in self.jobs if j.ended]
        gone = ended[: max(0, len(ended) - KEEP_ENDED)]
        extra = len(self.jobs) - len(gone) - MAX_JOBS
        if extra > 0:
            gone += [j for j in self.jobs if j not in gone][:extra]
        for job in gone:
            self.jobs.remove(job)
            if self._by_key.get(job.key) is job:
                del self._by_key[job.key]
            for worker, rank in job.workers.items():
                if self._by_worker.get(worker) is job:
                    del self._by_worker[worker]
                pid = rank.identity.get("pid")
                if isinstance(pid, int):
                    self.exits.forget(pid)
            self._alarms.pop(job.id, None)
            self._looked.pop(job.id, None)
            self._job_cell.pop(job.id, None)
            if self._root_exception is not None and self._root_exception[0] == job.id:
                self._root_exception = None

    def process_exited(self, pid: int, code: int, stopped: bool) -> None:
        """torch's join (mp_wrap.py) reaped ``pid`` with ``code``; ``stopped``: it
        terminated it because another rank failed. From any thread; never raises."""
        try:
            with self.lock:
                self.exits.reported(pid, code, stopped, self._clock())
            self._ensure_thread()
        except Exception:
            self._on_error("ranks:exit")

    def _exception(self, job: Job, worker: bytes, content: JsonObject) -> m.Exception:
        rank = job.workers[worker]
        rank.ended = "failed"
        self._exceptions += 1
        cell_id, count = self._job_cell.get(job.id, (None, None))
        message = panel_exception.build(
            content,
            dict(rank.identity),
            message_id=f"{self._session}-r{self._exceptions}",
            cell_id=cell_id,
            execution_count=count,
        )
        info = message["exception"]
        first = (info["message"].strip().splitlines() or [""])[0][:300]
        what = f"{info['type']}: {first}" if first else info["type"]
        secondary = from_collective(content)
        self.alarms_of(job).failed(rank, what, secondary=secondary)
        root = self._root_exception
        if root is None or root[0] != job.id or (not secondary and from_collective(root[1])):
            self._root_exception = (job.id, message)  # the root cause: shown last (cell_failed)
        self._dirty = True
        return message

    def cell_failed(self, exc: object) -> None:
        """The cell that ran the job failed because a rank did (torch's
        ProcessRaisedException / ProcessExitedException, already sent to the panels as the
        cell's exception): send the failing rank's exception once more, as the newest, so
        the panel shows the rank and its own traceback rather than the launcher's."""
        name = type(exc).__name__
        if name not in ("ProcessRaisedException", "ProcessExitedException"):
            return
        with self.lock:
            root = self._root_exception
            job = self.jobs[-1] if self.jobs else None
            if root is None or job is None or root[0] != job.id:
                return
            self._exceptions += 1
            again = {
                **root[1],
                "id": f"{self._session}-r{self._exceptions}",
                "time": round(self._wall(), 3),
            }
        self._broadcast(again)

    def paused_workers(self) -> list[bytes]:
        with self.lock:
            return [
                r.worker
                for j in self.jobs
                if not j.ended
                for r in j.ranks.values()
                if r.phase == "paused" or j.paused_at is not None or j.pending is not None
            ]

    def close(self) -> None:
        self._stop.set()
        self._nudge.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
