"""One torch.distributed job as the kernel sees it: the ranks of one world.

A ``Job`` is fed the worker messages of one world (same ``job_key``) by the aggregator
(``aggregator.py``), which holds the lock: nothing here locks or sends. Its ranks
(``rank.py``) keep their points and states; the job knows which ranks live, when it has
ended, and (FSDP) the global gradient norm combined from its ranks' shard norms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from ..wire.signals import wire_int
from .norms import norm_value, wire_norm
from .rank import LOST_S, TERMINAL, Rank

if TYPE_CHECKING:
    from ...protocol import messages as m


def valid_identity(raw: object, fallback_pid: int = 0) -> m.RankIdentity | None:
    """A ``RankIdentity`` from a worker's hello, or None when it is unusable."""
    if not isinstance(raw, dict):
        return None
    rank, world = wire_int(raw.get("rank")), wire_int(raw.get("world_size"), 1)
    if rank is None or world is None or rank > 65535 or world > 65536:
        return None
    launcher = raw.get("launcher")
    if launcher not in ("spawn", "fork", "torchrun", "attach"):
        launcher = "attach"
    return {
        "rank": rank,
        "world_size": world,
        "local_rank": wire_int(raw.get("local_rank")),
        "host": str(raw.get("host", ""))[:256],
        "pid": wire_int(raw.get("pid")) or fallback_pid,
        "launcher": cast("m.RankIdentityLauncher", launcher),  # one of them: checked above
    }


@dataclass
class Job:
    """The ranks of one world."""

    id: int
    key: str
    started: float
    transport: str = "ipc"
    ranks: dict[int, Rank] = field(default_factory=dict)
    workers: dict[bytes, Rank] = field(default_factory=dict)
    world_size: int = 1
    paused_at: int | None = None
    pending: m.RankPending | None = None
    ended: bool = False
    #: Sampled steps up to here were compared across ranks (desync).
    checked_upto: int = 0
    #: ``ordered``'s cache (None: to sort again).
    _order: list[Rank] | None = field(default=None, repr=False)

    def add(self, worker: bytes, identity: m.RankIdentity, now: float, torch: str = "") -> Rank:
        """A hello: a new rank, or a known worker whose identity changed."""
        rank = self.workers.get(worker)
        if rank is None:
            rank = Rank(worker, identity, seen_at=now, torch=torch)
        elif self.ranks.get(rank.number) is rank:
            del self.ranks[rank.number]
        rank.identity, rank.seen_at = identity, now
        self.workers[worker] = rank
        self.ranks[rank.number] = rank
        self._order = None
        self.world_size = max(self.world_size, int(identity["world_size"]), len(self.ranks))
        return rank

    def holder(self, number: int, worker: bytes, now: float, hang_s: float) -> Rank | None:
        """The live rank of another worker holding slot ``number``: a hello claiming it is
        refused while that rank's process lives (R56); an ended or lost one gives it up."""
        held = self.ranks.get(number)
        if held is None or held.worker == worker or held.state(now, hang_s) in TERMINAL:
            return None
        return held

    def remove(self, worker: bytes) -> None:
        rank = self.workers.pop(worker, None)
        if rank is not None and self.ranks.get(rank.number) is rank:
            del self.ranks[rank.number]
        self._order = None

    def ordered(self) -> list[Rank]:
        """The ranks by number (a new list; the sorted order is kept until a hello or a
        removal changes the ranks)."""
        order = self._order
        if order is None or len(order) != len(self.ranks):
            order = self._order = [self.ranks[k] for k in sorted(self.ranks)]
        return list(order)

    def live(self, now: float, hang_s: float) -> list[Rank]:
        """Ranks still running (not exited, failed or lost)."""
        return [r for r in self.ordered() if r.state(now, hang_s) not in TERMINAL]

    def any_live(self, now: float, hang_s: float) -> bool:
        """Whether a rank still runs: stops at the first one (called on every message)."""
        return any(r.state(now, hang_s) not in TERMINAL for r in self.ranks.values())

    def update_ended(self, now: float, hang_s: float) -> bool:
        """The job ends when every rank has ended (and the whole world attached, or
        nothing came for ``LOST_S``); True when that happened now."""
        if self.ended or not self.ranks or self.any_live(now, hang_s):
            return False
        if len(self.ranks) < self.world_size:
            # a rank of this world may not have said hello yet (its first step came late)
            last = max(r.seen_at for r in self.ranks.values())
            if now - last < LOST_S:
                return False
        self.ended = True
        self.pending = None
        return True

    def fastest_steps_per_s(self) -> float:
        times = [t for t in (r.step_time() for r in self.ranks.values()) if t]
        return 1.0 / min(times) if times else 0.0

    def sharded(self) -> bool:
        return any(r.replicas is not None for r in self.ranks.values())

    def global_norm(self) -> tuple[int, float | str] | None:
        """FSDP: the global gradient norm at the latest sampled step every rank of the
        world has read, from their shard norms: sqrt(sum of squares / replicas) (each
        shard is held by ``replicas`` ranks). Nothing is asked of the ranks: the norms
        are the ones their rows carried. None while a rank of the world has not read
        that step (or the job is not sharded)."""
        ranks = list(self.ranks.values())
        if len(ranks) < self.world_size or not ranks:
            return None
        replicas = max((r.replicas or 0) for r in ranks)
        if replicas < 1 or any(r.replicas is None for r in ranks):
            return None
        for step in reversed(ranks[0].norms_by_step):
            norms = [r.norms_by_step.get(step) for r in ranks]
            if any(n is None for n in norms):
                continue
            total = 0.0
            for n in norms:
                v = norm_value(n)
                total += math.nan if v is None else v * v
            found = wire_norm(math.sqrt(total / replicas))
            return None if found is None else (step, found)
        return None

    def to_json(self) -> m.RankJob:
        out: m.RankJob = {
            "id": self.id,
            "started": self.started,
            "world_size": self.world_size,
            "state": "ended" if self.ended else "running",
            # the endpoint's transport (endpoint.py: ``ipc`` or ``tcp``)
            "transport": cast("m.RankJobTransport", self.transport),
            "paused_at": self.paused_at,
            "pending": self.pending,
        }
        if self.sharded():
            found = self.global_norm()
            out["sharded"] = {
                "replicas": max((r.replicas or 1) for r in self.ranks.values()),
                # ``wire_norm``'s: a float or one of its three strings
                "global_norm": None if found is None else cast("m.FiniteOrSpecial", found[1]),
                "global_step": None if found is None else found[0],
            }
        return out

    def states(
        self,
        now: float,
        hang_s: float,
        known: dict[int, m.RankIdentity] | None = None,
        read: list[str] | None = None,
    ) -> list[m.RankState]:
        """Every rank's ``RankState``. ``known``: rank number -> the identity the panels
        have (a broadcast's, panels.py): a rank whose identity is the same goes without
        it, the others with it, and ``known`` is updated to what this message says.
        ``read``: the ranks' states at ``now`` in rank order, when the caller read them."""
        ranks = self.ordered()
        if read is None or len(read) != len(ranks):
            read = [r.state(now, hang_s) for r in ranks]
        if known is None:
            pairs = zip(ranks, read, strict=True)
            return [r.to_json(now, hang_s, state=s) for r, s in pairs]
        out = []
        for r, state in zip(ranks, read, strict=True):
            number = r.number
            same = known.get(number) == r.identity
            if not same:
                known[number] = r.identity.copy()
            out.append(r.to_json(now, hang_s, identity=not same, state=state))
        return out

    def points(self, replay: bool, newest: bool = False) -> list[m.RankPoints]:
        """Each rank's new points (``newest``: only its newest one; every kept point
        when ``replay``)."""
        out = []
        for r in self.ordered():
            p = r.take_points(replay, newest)
            if p is not None:
                out.append(p)
        return out
