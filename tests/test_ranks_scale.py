"""Hundreds of ranks (issue #25): what the kernel side does differently above 16 ranks.

Workers are asked (``config``) to report less often so that all ranks together send about
40 messages a second; ``ranks`` messages are spaced out with the number of ranks and
carry each rank's newest point; a rank reporting every 2.5 s is not
"waiting" between its reports; the desync check runs once per look, not per message.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable

import pytest
from test_ranks_job import Harness, w

from jupyterlab_torchdbg import ranks_sim as sim
from jupyterlab_torchdbg.ranks.kernel.endpoint import Endpoint
from jupyterlab_torchdbg.ranks.kernel.job import Job
from jupyterlab_torchdbg.ranks.kernel.scale import COMPACT_ABOVE, FLUSH_S, cadence, flush_s
from jupyterlab_torchdbg.ranks.wire import transport as wire
from jupyterlab_torchdbg.ranks.worker.agent import HEARTBEAT_S, ROWS_S, Agent
from jupyterlab_torchdbg.ranks.worker.cadence import MAX_INTERVAL_S

LAYERS = {"step": 3, "names": ["a", "b"], "norms": [1.0, 0.5]}


def test_cadence_and_flush_interval_grow_with_the_ranks() -> None:
    assert cadence(COMPACT_ABOVE) == {} and flush_s(COMPACT_ABOVE) == 0.1
    assert cadence(64) == {"rows_s": 1.6, "heartbeat_s": 1.6, "row_stride": 2}
    assert cadence(256) == {"rows_s": 6.4, "heartbeat_s": 6.4, "row_stride": 8}
    # never more than the wire and the agent take (a larger one would be ignored)
    assert cadence(4096) == {"rows_s": 8.0, "heartbeat_s": 8.0, "row_stride": 64}
    assert cadence(4096)["rows_s"] <= MAX_INTERVAL_S
    assert flush_s(64) == 0.75 and flush_s(128) == 1.5
    assert flush_s(256) == 3.0 and flush_s(100_000) == 3.0


def test_the_agent_takes_the_cadence_within_bounds() -> None:
    agent = Agent.__new__(Agent)
    agent.worker = types.SimpleNamespace(row_stride=1)  # type: ignore[assignment]
    agent.rows_s, agent.heartbeat_s = ROWS_S, HEARTBEAT_S
    agent._cadence({"hang_s": 10})
    assert (agent.rows_s, agent.heartbeat_s) == (ROWS_S, HEARTBEAT_S)
    agent._cadence({"rows_s": 0.64, "heartbeat_s": 0.64})
    assert (agent.rows_s, agent.heartbeat_s) == (0.64, 0.64)
    agent._cadence({"rows_s": 999, "heartbeat_s": 0.001})
    assert (agent.rows_s, agent.heartbeat_s) == (MAX_INTERVAL_S, HEARTBEAT_S)
    agent._cadence({"rows_s": True, "heartbeat_s": "1"})  # not numbers: ignored
    assert (agent.rows_s, agent.heartbeat_s) == (MAX_INTERVAL_S, HEARTBEAT_S)
    assert agent.worker.row_stride == 1
    agent._cadence({"row_stride": 8})
    assert agent.worker.row_stride == 8
    for wrong in (3, 0, 128, True, 8.0):  # not a power of two up to 64: ignored
        agent._cadence({"row_stride": wrong})
        assert agent.worker.row_stride == 8


def _job(h: Harness, world: int) -> None:
    for n in range(world):
        h.hello(n, world=world, key=f"k{world}")
    for n in range(world):
        h.rows(n, range(1, 4), norm=1.0, layers=LAYERS)


def test_few_ranks_keep_every_point_and_the_agents_cadence() -> None:
    h = Harness()
    _job(h, 4)
    assert all("rows_s" not in c for _, _, c in h.ep.of("config"))
    h.tick()
    (msg,) = h.ranks_msgs()
    # the per-layer norms stay in the kernel (the desync check): none to the panel
    assert all("layers" not in r for r in msg["ranks"])
    assert [h.hub.jobs[-1].ranks[n].layers_at(3) for n in range(4)] == [
        {"step": 3, "names": ["a", "b"], "norms": [1.0, 0.5]}
    ] * 4
    assert [len(p["steps"]) for p in msg["points"]] == [3] * 4


def test_many_ranks_compact_messages_spaced_out() -> None:
    h = Harness()
    _job(h, 64)
    configs = h.ep.of("config")
    assert len(configs) == 64 and all(c["rows_s"] == 1.6 for _, _, c in configs)
    h.tick()
    (msg,) = h.ranks_msgs()
    assert len(msg["ranks"]) == 64
    # each rank's newest point: its step, time and norm
    assert [p["steps"] for p in msg["points"]] == [[3]] * 64
    assert msg["points"][0]["grad_norm"] == [1.0]
    for step in range(4, 16):  # new points every look: messages 0.75 s apart at 64 ranks
        for n in range(64):
            h.rows(n, range(step, step + 1), norm=1.0)
        h.tick(0.25)
    gaps = [b - a for a, b in zip(h.sent_at, h.sent_at[1:], strict=False)]
    assert gaps and min(gaps) >= flush_s(64) - 1e-9


def test_a_rank_reporting_every_few_seconds_is_running_between_reports() -> None:
    h = Harness()
    _job(h, 256)
    for n in range(256):
        h.rows(n, range(4, 40), norm=1.0, dt=0.05)
        h.beat(n, 39, 0.0, "torch_wait")  # inside a collective when it reported
    h.tick(6.0)  # 6 s since the last rows (reports every 6.4 s at 256 ranks)
    assert {r["state"] for r in h.last()["ranks"]} == {"running"}
    h.tick(7.0)  # two reports missed: the others are late
    assert {r["state"] for r in h.last()["ranks"]} == {"waiting"}


def test_a_rank_that_says_it_is_stuck_is_stalled_at_hang_s_whatever_the_cadence() -> None:
    """At 256 ranks a rank is late only after two missed reports (12.8 s), but its own
    heartbeat with a stack (sent once it has not stepped for ``hang_s``) is believed at
    once: stalled at 10 s, not 12.8."""
    h = Harness()
    _job(h, 256)
    for n in range(256):
        h.rows(n, range(4, 40), norm=1.0, dt=0.05)
    h.tick(1.0)
    h.clock.t += flush_s(256) - 1.0
    h.beat(3, 39, 10.2, "user", stack=["train.py:40 in loop"], user=[True])
    h.beat(4, 39, 10.2, "user")  # no stack: nothing said of a hang yet
    h.tick(1.0)  # 11.2 s without a step
    states = {r["rank"]: r["state"] for r in h.last()["ranks"]}
    assert states[3] == "stalled"
    assert states[4] == "running" and states[5] == "running"
    h.rows(3, range(40, 41), norm=1.0, dt=0.05)  # it stepped again: the stack is gone
    h.tick(flush_s(256))
    assert {r["rank"]: r["state"] for r in h.last()["ranks"]}[3] == "running"
    # a rank whose steps take 5 s is late only after three of them (its own pace), stack
    # or not
    slow = Harness()
    _job(slow, 256)
    for n in range(256):
        slow.rows(n, range(4, 40), norm=1.0, dt=5.0 if n == 6 else 0.05)
    slow.beat(6, 39, 10.2, "user", stack=["train.py:40 in loop"], user=[True])
    slow.tick(flush_s(256))
    assert {r["rank"]: r["state"] for r in slow.last()["ranks"]}[6] == "running"
    slow.tick(3.0)
    assert {r["rank"]: r["state"] for r in slow.last()["ranks"]}[6] == "stalled"


def test_desync_is_still_found_once_per_look_and_named() -> None:
    h = Harness()
    _job(h, 32)
    for n in range(32):
        h.rows(n, range(4, 6), norm=9.0 if n == 7 else 1.0)
    (alarm,) = h.alarms("desync")
    assert alarm["rank"] == 7 and alarm["step"] == 4


def test_ordered_ranks_follow_hellos_and_removals() -> None:
    job = Job(1, "k", 0.0)
    ident = {"rank": 0, "world_size": 3}
    for n in (2, 0, 1):
        job.add(w(n), {**ident, "rank": n}, 0.0)
    assert [r.number for r in job.ordered()] == [0, 1, 2]
    job.add(w(2), {**ident, "rank": 5}, 0.0)  # its identity changed
    assert [r.number for r in job.ordered()] == [0, 1, 5]
    job.remove(w(0))
    assert [r.number for r in job.ordered()] == [1, 5]
    job.ordered().clear()  # a copy: the job's order is untouched
    assert [r.number for r in job.ordered()] == [1, 5]


def test_the_others_median_of_each_rank_is_statistics_median_without_it() -> None:
    """The straggler check reads each rank's own time once and takes the others' median
    from one sorted list (no quadratic re-reading at hundreds of ranks)."""
    import random
    import statistics

    from jupyterlab_torchdbg.ranks.kernel.alarms import median_without

    rng = random.Random(0)
    for _ in range(2000):
        values = sorted(rng.choice([0.1, 0.2, 0.3, rng.random()]) for _ in range(rng.randint(2, 9)))
        left_out = rng.choice(values)
        others = list(values)
        others.remove(left_out)
        assert median_without(values, left_out) == statistics.median(others)


def test_hundreds_of_ranks_read_as_ranges_in_sentences() -> None:
    from jupyterlab_torchdbg.ranks.kernel.words import rank_list

    assert rank_list([3]) == "rank 3"
    assert rank_list([0, 2, 3]) == "ranks 0, 2, 3"
    assert rank_list([0, 1, 2, 3]) == "ranks 0, 1, 2, 3"
    assert rank_list([*range(200), *range(201, 256)]) == "ranks 0-199, 201-255"
    assert rank_list([7, *range(10, 15), 2]) == "ranks 7, 10-14, 2"  # the order given


def test_the_flusher_sleeps_until_its_next_look_with_many_ranks() -> None:
    """Few ranks: it looks every FLUSH_S. Many: it sleeps until the next message or clock
    look may be due (at most flush_s), FLUSH_S again while an all-rank action waits."""
    few = Harness()
    assert few.hub._wait_s() == FLUSH_S  # no job yet
    _job(few, 4)
    few.tick()
    assert few.hub._wait_s() == FLUSH_S
    h = Harness()
    _job(h, 256)
    h.tick()  # a message and a look now: the next ones in flush_s(256)
    assert len(h.ranks_msgs()) == 1
    assert h.hub._wait_s() == pytest.approx(flush_s(256))
    h.clock.t += 1.5
    assert h.hub._wait_s() == pytest.approx(flush_s(256) - 1.5)
    h.clock.t += 2.0  # overdue: the shortest wait
    assert h.hub._wait_s() == FLUSH_S
    h.hub.jobs[-1].pending = {"action": "pause", "at_step": 9, "request_id": "r"}
    h.clock.t -= 3.5
    assert h.hub._wait_s() == FLUSH_S


def test_the_endpoint_reads_many_ranks_messages_together() -> None:
    """A hello sets the endpoint's pause between two reads: 50 ms with few ranks, the
    flush interval above COMPACT_ABOVE, within [250 ms, 1 s] (each one a wake-up of the
    kernel's thread saved)."""
    cases = ((4, 50), (COMPACT_ABOVE, 50), (COMPACT_ABOVE + 1, 250), (32, 375), (64, 750))
    for world, ms in (*cases, (256, 1000), (4096, 1000)):
        h = Harness()
        h.ep.coalesce_ms = 0
        h.hello(0, world=world, key=f"k{world}")
        assert h.ep.coalesce_ms == ms


def test_many_ranks_broadcasts_carry_each_identity_once() -> None:
    """Protocol 2.8: above 16 ranks a rank's identity goes in the broadcast that first
    shows it (or the first after it changed); a panel that opens (reload, second panel)
    or asks gets every identity in the replay."""
    h = Harness()
    _job(h, 64)
    h.tick()
    (first,) = h.ranks_msgs()
    assert [r["identity"]["rank"] for r in first["ranks"]] == list(range(64))
    assert all(r["rank"] == r["identity"]["rank"] for r in first["ranks"])
    assert all(r["identity"]["host"] == "node0" for r in first["ranks"])
    h.step_all(range(64), range(4, 5), norm=1.0)
    h.tick(flush_s(64))
    second = h.ranks_msgs()[-1]
    assert second is not first and len(second["ranks"]) == 64
    assert [r["rank"] for r in second["ranks"]] == list(range(64))
    assert all("identity" not in r for r in second["ranks"])
    # a rank whose worker came back with another identity (a new pid): that one again
    moved = {"rank": 5, "world_size": 64, "local_rank": 5, "host": "node1", "pid": 99}
    moved["launcher"] = "spawn"
    h.hub.on_message(w(5), "hello", {"identity": moved, "job_key": "k64", "torch": "2"})
    h.step_all(range(64), range(5, 6), norm=1.0)
    h.tick(flush_s(64))
    third = h.ranks_msgs()[-1]
    sent = [r for r in third["ranks"] if "identity" in r]
    assert [(r["rank"], r["identity"]["host"], r["identity"]["pid"]) for r in sent] == [
        (5, "node1", 99)
    ]
    # a panel that opens now (a reload, a second panel) or asks: every rank's identity
    (replay,) = h.hub.snapshot_messages()
    assert replay["replay"] is True
    hosts = {r["rank"]: r["identity"]["host"] for r in replay["ranks"]}
    assert hosts == {n: "node1" if n == 5 else "node0" for n in range(64)}
    # ... and the broadcasts go on without them (the replay went to that panel only)
    h.step_all(range(64), range(6, 7), norm=1.0)
    h.tick(flush_s(64))
    assert all("identity" not in r for r in h.ranks_msgs()[-1]["ranks"])
    # a direct message (not a broadcast) has them all
    assert all("identity" in r for r in h.hub.message()["ranks"])


def test_a_new_job_sends_its_ranks_identities_again() -> None:
    h = Harness()
    _job(h, 32)
    h.tick()
    for n in range(32):
        h.hub.on_message(w(n), "bye", {"state": "exited"})
    h.tick(flush_s(32))
    ended = h.ranks_msgs()[-1]
    assert ended["job"]["state"] == "ended"
    assert all("identity" not in r for r in ended["ranks"])
    for n in range(32):  # the same workers, a new job of the same world
        h.hello(n, world=32, key="k32")
    h.tick(flush_s(32))
    msg = h.ranks_msgs()[-1]
    assert msg["job"]["id"] != ended["job"]["id"]
    assert [r["identity"]["rank"] for r in msg["ranks"]] == list(range(32))


def test_few_ranks_send_every_identity_in_every_message() -> None:
    h = Harness()
    _job(h, COMPACT_ABOVE)
    for step in range(4, 7):
        h.step_all(range(COMPACT_ABOVE), range(step, step + 1))
        h.tick(FLUSH_S)
    msgs = h.ranks_msgs()
    assert len(msgs) >= 3
    assert all("identity" in r and r["rank"] == r["identity"]["rank"] for m in msgs
               for r in m["ranks"])  # fmt: skip


def test_rows_are_checked_field_by_field_as_before() -> None:
    """The fast path of ``Rank.add_rows`` (issue #25) takes what the wire_* checks take."""
    h = Harness()
    h.hello(0)
    rank = h.hub.jobs[-1].ranks[0]
    rows = [
        {"step": True, "dt": 0.1, "norm": 1.0},  # a bool is no step
        {"step": 0, "dt": 0.1, "norm": 1.0},  # steps start at 1
        {"step": 1, "dt": -0.5, "norm": float("nan"), "mem": -3, "mem_kind": "disk"},
        {"step": 2, "dt": float("inf"), "norm": 2, "mem": True, "mem_kind": "cuda"},
        {"step": 3, "dt": 1, "norm": "Infinity", "mem": 7, "replicas": 2},
        {"step": 4, "dt": 0.25, "norm": float("-inf"), "mem": 8, "replicas": True},
        {"step": 5, "dt": "0.1", "norm": True, "mem": 2.5},
    ]
    sampled = rank.add_rows({"rows": rows, "own": 0.5}, 1.0)
    assert sampled == [1, 2, 3, 4]
    assert list(rank.points) == [
        (1, None, "NaN", None),
        (2, None, 2.0, None),
        (3, 1.0, "Infinity", 7),
        (4, 0.25, "-Infinity", 8),
        (5, None, None, None),
    ]
    assert rank.mem_kind == "cuda" and rank.replicas == 2 and rank.mem == 8
    assert list(rank.dts) == [1.0, 0.25] and list(rank.owns) == [0.5, 0.125]
    assert (rank.step, rank.row_step, rank.norm, rank.norm_step) == (5, 5, "-Infinity", 4)


def test_a_ranks_layers_are_read_in_model_order_when_asked() -> None:
    h = Harness()
    h.hello(0)
    rank = h.hub.jobs[-1].ranks[0]
    layers = {"step": 3, "names": ["a", "b", "c"], "norms": [0.5, "NaN", 2.0]}
    rank.add_rows({"rows": [{"step": 3, "norm": 1.0}], "layers": layers}, 1.0)
    assert rank._layers_read == {}  # not read until asked
    at = rank.layers_at(3)
    assert at == {"step": 3, "names": ["a", "b", "c"], "norms": [0.5, "NaN", 2.0]}


def test_sampled_norms_stay_in_step_order_for_the_desync_check() -> None:
    """The desync check reads each rank's sampled steps newest first down to the last
    compared one: a row of an earlier step sent late is kept in step order, compared."""
    h = Harness()
    for n in range(2):
        h.hello(n, world=2)
    h.rows(0, range(1, 3), norm=1.0)
    h.rows(1, range(1, 3), norm=1.0)
    h.tick()
    h.rows(0, range(4, 5), norm=1.0)
    h.rows(0, range(3, 4), norm=1.0)  # late, out of order
    h.rows(1, range(3, 5), norm=1.0)
    assert list(h.hub.jobs[-1].ranks[0].norms_by_step) == [1, 2, 3, 4]
    h.rows(1, range(5, 6), norm=2.0)
    h.rows(0, range(5, 6), norm=1.0)
    h.tick(1.0)
    assert [(a["kind"], a["step"]) for a in h.alarms("desync")] == [("desync", 5)]


class _Sock:
    """What ``wire.send`` needs of a socket: the frames it was given."""

    def __init__(self) -> None:
        self.sent: list[list[bytes]] = []

    def send_multipart(self, parts: list[bytes], flags: int = 0) -> None:
        self.sent.append(list(parts))


def _stuck_here(release: threading.Event) -> None:
    release.wait(30)


def test_a_stuck_rank_says_so_at_once_whatever_its_heartbeat_interval() -> None:
    """At 256 ranks an agent beats every 6.4 s, but the heartbeat that first finds its
    training thread without a step for ``hang_s`` goes at the next tick, with the stack;
    once per step (the cadence's own heartbeats carry it after that)."""
    key = wire.new_key()
    worker = sim.SimWorker(0, 256, 0.1, "ipc://unused", key)
    agent = Agent(worker)
    agent._cadence({"rows_s": 6.4, "heartbeat_s": 6.4})
    now = time.monotonic()
    agent._next = {"rows": now + 6.4, "beat": now + 6.4, "ident": now + 60}
    release = threading.Event()
    trainer = threading.Thread(target=_stuck_here, args=(release,), daemon=True)
    trainer.start()
    try:
        worker.train_tid = trainer.ident
        worker.hang_s = 10.0
        worker.agreed.step = 7
        worker._last = time.perf_counter() - 9.0
        sess, sock, kernel = wire.session(key), _Sock(), wire.session(key)
        agent._tick(sess, sock)  # 9 s: not stuck yet, the next beat is 6.4 s away
        assert sock.sent == []
        worker._last -= 1.5
        agent._tick(sess, sock)
        ((_, kind, beat),) = [wire.verify(kernel, parts) for parts in sock.sent]
        assert kind == "heartbeat" and beat["step"] == 7
        assert isinstance(beat["since_step_s"], float) and beat["since_step_s"] >= 10.0
        assert any("_stuck_here" in line for line in beat["stack"])
        agent._tick(sess, sock)  # still stuck at the same step: said already
        assert len(sock.sent) == 1
        worker.agreed.step = 8  # it stepped, then got stuck again
        agent._tick(sess, sock)
        assert len(sock.sent) == 2
    finally:
        release.set()
        trainer.join(5)


def test_answers_to_what_the_kernel_sent_are_read_without_the_long_pause() -> None:
    """With 256 ranks the endpoint pauses 1 s between two reads; after it sent workers
    something (an all-rank action's ``prepare``), their answers are read within 50 ms
    pauses for ``BRISK_S``: an answer 150 ms after the first is not held back a second."""
    got: list[tuple[float, bytes, str]] = []
    ep = Endpoint(lambda ident, kind, _c: got.append((time.monotonic(), ident, kind)))
    workers = []
    try:
        ep.coalesce_ms = 1000
        for i in range(2):
            ctx, sock = wire.connect(ep.address, ep.key)
            sess = wire.session(ep.key, ep.job)
            workers.append((ctx, sock, sess))
            wire.send(sess, sock, "hello", {"n": i})
        _wait(lambda: len(got) == 2)
        time.sleep(1.2)  # the pause after the hellos is over
        for _, ident, _ in list(got):
            ep.send(ident, "prepare", {})
        answered_at = []
        for (_, sock, sess), delay in zip(workers, (0.0, 0.15), strict=True):
            assert sock.poll(2000)
            assert wire.recv(sess, sock) is not None
            time.sleep(delay)
            answered_at.append(time.monotonic())
            wire.send(sess, sock, "ack", {})
        _wait(lambda: sum(kind == "ack" for _, _, kind in got) == 2)
        last_ack = max(t for t, _, kind in got if kind == "ack")
        assert last_ack - answered_at[1] < 0.5
        ep._brisk_until = 0.0  # BRISK_S later: the long pause again
        assert ep._pause_ms() == 1000
    finally:
        for ctx, sock, _ in workers:
            sock.close(0)
            ctx.term()
        ep.close()


def _wait(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)
