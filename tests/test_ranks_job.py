"""The kernel side of multi-process training, fed synthetic worker messages (issue #15).

A ``RankHub`` with a fake clock and a recording endpoint: jobs and ranks from ``hello``,
points from ``rows``, the alarms (desync, straggler, hang, failed, lost, action) on the
right rank with the right figures and none on a healthy job, ``ranks`` messages coalesced
to at most 10 a second, and the two-phase all-rank actions with a rank that refuses, is
late or is silent. Every message the hub broadcasts is validated against the schema.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from kernel_client import validate_kernel_message

from jupyterlab_torchdbg.kernel.action_registry import ActionRegistry
from jupyterlab_torchdbg.ranks.kernel.aggregator import RankHub

KEY = "127.0.0.1:29500:4"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class FakeEndpoint:
    """Records what the hub sends; ``answer(worker, msg_type, content)`` may reply."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, str, dict[str, Any]]] = []
        self.refused = 0
        self.answer: Any = None

    def send(self, worker: bytes, msg_type: str, content: dict[str, Any]) -> None:
        self.sent.append((worker, msg_type, content))
        if self.answer is not None:
            self.answer(worker, msg_type, content)

    def of(self, msg_type: str) -> list[tuple[bytes, str, dict[str, Any]]]:
        return [s for s in self.sent if s[1] == msg_type]


class Harness:
    def __init__(self, ack_timeout: float = 0.3) -> None:
        self.clock = Clock()
        self.out: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.sent_at: list[float] = []
        self.hub = RankHub(
            self.broadcast,
            self.errors.append,
            "testsession",
            clock=self.clock,
            wall=lambda: 1.7e9 + self.clock.t,
            ack_timeout=ack_timeout,
            threaded=False,
        )
        self.ep = FakeEndpoint()
        self.hub.endpoint = self.ep

    def broadcast(self, msg: dict[str, Any]) -> None:
        validate_kernel_message(msg)
        self.out.append(msg)
        self.sent_at.append(self.clock.t)

    def hello(self, n: int, world: int = 4, key: str = KEY) -> None:
        identity = {
            "rank": n,
            "world_size": world,
            "local_rank": n,
            "host": "node0",
            "pid": 4000 + n,
            "launcher": "spawn",
        }
        self.hub.on_message(w(n), "hello", {"identity": identity, "job_key": key, "torch": "2"})

    def rows(
        self,
        n: int,
        steps: range,
        norm: Any = 1.25,
        dt: float = 0.1,
        own: float = 0.5,
        layers: dict[str, Any] | None = None,
    ) -> None:
        rows = [
            {"step": s, "t": 0.0, "dt": dt, "norm": norm, "mem": 1000 + n, "mem_kind": "host"}
            for s in steps
        ]
        content = {"rows": rows, "layers": layers, "own": own, "phase": "user"}
        self.hub.on_message(w(n), "rows", content)

    def beat(
        self, n: int, step: int, since: float, phase: str, stack: Any = None, user: Any = None
    ) -> None:
        content = {"step": step, "since_step_s": since, "phase": phase, "stack": stack}
        if user is not None:
            content["stack_user"] = user
        self.hub.on_message(w(n), "heartbeat", content)

    def step_all(self, ranks: range, steps: range, **kw: Any) -> None:
        for n in ranks:
            self.rows(n, steps, **kw)

    def tick(self, dt: float = 0.1) -> None:
        self.clock.t += dt
        self.hub.tick()

    def ranks_msgs(self) -> list[dict[str, Any]]:
        return [m for m in self.out if m["method"] == "ranks"]

    def last(self) -> dict[str, Any]:
        msg = self.hub.message()
        validate_kernel_message(msg)
        return msg

    def alarms(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [a for a in self.last()["alarms"] if kind is None or a["kind"] == kind]


def w(n: int) -> bytes:
    return f"worker-{n}".encode()


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_a_healthy_four_rank_job_is_live_and_raises_no_alarm(h: Harness) -> None:
    for n in range(4):
        h.hello(n)
    assert [s[0] for s in h.ep.of("config")] == [w(n) for n in range(4)]
    assert all(s[2] == {"hang_s": h.hub.hang_s} for s in h.ep.of("config"))
    for k in range(30):
        h.step_all(range(4), range(k + 1, k + 2), norm=1.0 + k / 10)
        for n in range(4):
            h.beat(n, k + 1, 0.01, "torch_wait" if n % 2 else "user")
        h.tick()
    msg = h.last()
    assert msg["job"]["world_size"] == 4 and msg["job"]["state"] == "running"
    assert [r["state"] for r in msg["ranks"]] == ["running"] * 4
    assert [r["step"] for r in msg["ranks"]] == [30] * 4
    assert [r["grad_norm"] for r in msg["ranks"]] == [pytest.approx(3.9)] * 4
    assert [r["step_time_s"] for r in msg["ranks"]] == [0.1] * 4
    assert [r["own_time_s"] for r in msg["ranks"]] == [0.05] * 4
    assert [r["memory_bytes"] for r in msg["ranks"]] == [1000, 1001, 1002, 1003]
    assert msg["alarms"] == [] and not h.errors
    # every point reached the panel once, in order, per rank
    steps: dict[int, list[int]] = {}
    for m in h.ranks_msgs():
        for p in m["points"]:
            steps.setdefault(p["rank"], []).extend(p["steps"])
    assert steps == {n: list(range(1, 31)) for n in range(4)}
    # a panel that connects now gets every kept point, and the others lose none
    (replay,) = h.hub.snapshot_messages()
    validate_kernel_message(replay)
    assert replay["replay"] is True
    assert [p["steps"] for p in replay["points"]] == [list(range(1, 31))] * 4


def test_desync_names_the_odd_rank_its_norm_and_first_layer(h: Harness) -> None:
    for n in range(4):
        h.hello(n)
    good = {"step": 7, "names": ["fc1.weight", "fc2.weight"], "norms": [1.0, 0.5]}
    bad = {"step": 7, "names": ["fc2.weight", "fc1.weight"], "norms": [0.5, 1.3]}
    for n in range(4):
        h.rows(n, range(1, 7), norm=2.0)
        h.rows(n, range(7, 8), norm=2.5 if n == 2 else 2.0, layers=bad if n == 2 else good)
    h.step_all(range(4), range(8, 12), norm=2.0)  # later steps agree again
    h.tick()
    (alarm,) = h.alarms()
    assert (alarm["kind"], alarm["rank"], alarm["step"], alarm["layer"]) == (
        "desync",
        2,
        7,
        "fc1.weight",
    )
    assert "rank 2's gradient norm at step 7 is 2.5" in alarm["message"]
    assert "ranks 0, 1, 3 have 2" in alarm["message"]
    # once per rank per job
    h.step_all(range(4), range(12, 13), norm=9.0)
    h.rows(2, range(13, 14), norm=3.0)
    h.step_all(range(0, 2), range(13, 14), norm=9.0)
    h.rows(3, range(13, 14), norm=9.0)
    assert [a["rank"] for a in h.alarms("desync")] == [2]


def test_desync_with_two_ranks_names_rank_1_and_counts_nan(h: Harness) -> None:
    h.hello(0, world=2, key="k2")
    h.hello(1, world=2, key="k2")
    h.rows(0, range(1, 4), norm=1.0)
    h.rows(1, range(1, 3), norm=1.0)
    h.rows(1, range(3, 4), norm="NaN")
    (alarm,) = h.alarms("desync")
    assert alarm["rank"] == 1 and alarm["step"] == 3 and "is nan" in alarm["message"]
    assert "rank 0 has 1" in alarm["message"]


def test_desync_is_found_when_a_rank_ended_before_the_others_rows_came(h: Harness) -> None:
    h.hello(0, world=2, key="ke")
    h.hello(1, world=2, key="ke")
    h.rows(1, range(1, 6), norm=1.5)
    h.hub.on_message(w(1), "bye", {"state": "exited"})
    h.rows(0, range(1, 6), norm=1.0)
    h.hub.on_message(w(0), "bye", {"state": "exited"})
    assert [(a["kind"], a["rank"], a["step"]) for a in h.alarms()] == [("desync", 1, 1)]


def test_no_desync_check_before_every_rank_attached(h: Harness) -> None:
    h.hello(0, world=2, key="k")
    h.rows(0, range(1, 5), norm=1.0)
    h.hello(1, world=2, key="k")
    h.rows(1, range(1, 5), norm=1.0)
    h.tick()
    assert h.alarms() == []


def test_straggler_names_the_slow_rank_with_both_figures(h: Harness) -> None:
    for n in range(4):
        h.hello(n)
    for k in range(1, 9):
        for n in range(4):
            # step time is the same for all (they wait for each other); own work is not
            h.rows(n, range(k, k + 1), dt=0.25, own=0.8 if n == 3 else 0.2)
        h.tick()
    (alarm,) = h.alarms()
    assert (alarm["kind"], alarm["rank"]) == ("straggler", 3)
    assert "200 ms" in alarm["message"] and "50 ms" in alarm["message"]
    assert "4.0x" in alarm["message"]


def test_small_own_time_differences_are_not_a_straggler(h: Harness) -> None:
    for n in range(2):
        h.hello(n, world=2, key="k")
    for k in range(1, 12):
        h.rows(0, range(k, k + 1), dt=0.02, own=0.4)
        h.rows(1, range(k, k + 1), dt=0.02, own=0.9)  # 2.2x but only 10 ms more
        h.tick()
    assert h.alarms() == []


def test_hang_names_the_rank_in_user_code_with_its_stack(h: Harness) -> None:
    for n in range(3):
        h.hello(n, world=3, key="k3")
    h.step_all(range(3), range(1, 6))
    h.hub.hang_s = 5.0
    t0 = h.clock.t
    stack = ["train.py:10 in main: fn()", "work.py:31 in fn: time.sleep(60)"]
    for _ in range(30):  # 3 s: nothing
        h.tick()
        for n in range(3):
            h.beat(n, 5, h.clock.t - t0, "user" if n == 1 else "torch_wait")
    assert h.alarms() == []
    assert [r["state"] for r in h.last()["ranks"]] == ["waiting", "running", "waiting"]
    h.clock.t += 2.0
    h.tick()
    assert h.alarms() == []  # at the threshold, the stack is awaited for a moment
    h.beat(1, 5, h.clock.t - t0, "user", stack=stack)
    h.tick()
    (alarm,) = h.alarms()
    assert (alarm["kind"], alarm["rank"], alarm["step"]) == ("hang", 1, 5)
    assert alarm["stack"] == stack
    assert "rank 1 has not stepped for 5 s" in alarm["message"]
    assert "ranks 0, 2 wait in a collective" in alarm["message"]
    assert "time.sleep(60)" in alarm["message"]
    assert h.last()["ranks"][1]["state"] == "stalled"


def test_hang_stack_lists_the_users_frames_first_and_names_the_innermost(h: Harness) -> None:
    # issue #22: the stuck rank's stack read as a traceback in the exception view: the
    # user's frames first, the library's (and the tool's) after, collapsed by the panel
    for n in range(2):
        h.hello(n, world=2, key="k2")
    h.step_all(range(2), range(1, 5))
    h.hub.hang_s = 3.0
    t0 = h.clock.t
    stack = [
        "multiprocessing/process.py:314 in _bootstrap: self.run()",
        "torch/multiprocessing/spawn.py:90 in _wrap: fn(i, *args)",
        "train.py:10 in main: fn()",
        "train.py:31 in fn: batch = next(loader)",
        "torch/utils/data/dataloader.py:1320 in _get_data: success, data = ...",
        "threading.py:320 in wait: waiter.acquire()",
    ]
    user = [False, False, True, True, False, False]
    h.clock.t += 3.5
    h.beat(0, 4, h.clock.t - t0, "torch_wait")
    h.beat(1, 4, h.clock.t - t0, "user", stack=stack, user=user)
    h.tick()
    (alarm,) = h.alarms("hang")
    assert alarm["stack"] == [stack[2], stack[3], stack[0], stack[1], stack[4], stack[5]]
    assert alarm["stack_user"] == 2
    assert (
        "It is in train.py:31 in fn: batch = next(loader), inside threading.py:320 in wait"
        in alarm["message"]
    )
    assert "while rank 0 waits in a collective" in alarm["message"]  # one rank: "waits"


def test_hang_stack_without_user_frames_or_flags_keeps_the_call_order(h: Harness) -> None:
    for n in range(2):
        h.hello(n, world=2, key="k2")
    h.step_all(range(2), range(1, 5))
    h.hub.hang_s = 3.0
    t0 = h.clock.t
    h.clock.t += 3.5
    h.beat(0, 4, h.clock.t - t0, "user", stack=["a.py:1 in f: x", "b.py:2 in g: y"])
    h.beat(1, 4, h.clock.t - t0, "user", stack=["lib.py:1 in f: x"], user=[False])
    h.tick()
    by_rank = {a["rank"]: a for a in h.alarms("hang")}
    assert by_rank[0]["stack"] == ["a.py:1 in f: x", "b.py:2 in g: y"]  # an older worker
    assert "stack_user" not in by_rank[0] and "It is in b.py:2" in by_rank[0]["message"]
    assert by_rank[1]["stack_user"] == 0
    assert "no frame of its own code" in by_rank[1]["message"]


def test_failed_rank_becomes_an_exception_message_with_its_rank(h: Harness) -> None:
    h.hub.cell = ("cell-abc", 7)
    for n in range(2):
        h.hello(n, world=2, key="kf")
    h.step_all(range(2), range(1, 4))
    frames = [
        {
            "position": 0,
            "origin": "file",
            "user": True,
            "function": "fn",
            "file": "work.py",
            "lineno": 12,
            "line": "raise RuntimeError('boom on rank 1')",
            "locals": [],
            "locals_total": 0,
            "locals_truncated": False,
        },
    ]
    content = {
        "exception": {
            "type": "RuntimeError",
            "module": "builtins",
            "message": "boom on rank 1",
            "message_truncated": False,
        },
        "frames": frames,
        "diagnosis": None,
        "step": 3,
    }
    h.hub.on_message(w(1), "exception", content)
    (exc,) = [m for m in h.out if m["method"] == "exception"]  # validated by broadcast
    assert exc["rank"]["rank"] == 1 and exc["rank"]["pid"] == 4001
    assert (exc["cell_id"], exc["execution_count"], exc["debuggable"]) == ("cell-abc", 7, False)
    assert exc["focus"] == 0 and exc["diagnosis"]["headline"] == "RuntimeError: boom on rank 1"
    (alarm,) = h.alarms()
    assert (alarm["kind"], alarm["rank"], alarm["step"]) == ("failed", 1, 3)
    assert "RuntimeError: boom on rank 1" in alarm["message"]
    assert h.last()["ranks"][1]["state"] == "failed"
    h.hub.on_message(w(0), "bye", {"state": "exited"})
    h.tick()
    assert h.ranks_msgs()[-1]["job"]["state"] == "ended"


@pytest.mark.parametrize("category", ["shape_mismatch", "data_loader", "not_a_category"])
def test_a_ranks_diagnosis_keeps_only_what_the_schema_allows(h: Harness, category: str) -> None:
    """The categories and keys a worker's frame and diagnosis may keep are the schema's
    (``Diagnosis``, ``ExceptionFrame``): anything else is dropped, an unknown category
    gives the generic view; the broadcast validates the message either way."""
    for n in range(2):
        h.hello(n, world=2, key="kd")
    frame = {
        "position": 0,
        "origin": "file",
        "user": True,
        "function": "fn",
        "file": "work.py",
        "lineno": 3,
        "locals": [],
        "locals_total": 0,
        "locals_truncated": False,
        "injected": "<b>not a frame key</b>",
    }
    diagnosis = {
        "category": category,
        "title": "Shapes do not match",
        "headline": "`x` is 4x3, `w` is 5x2",
        "culprits": [],
        "hints": ["h"],
        "links": ["grads", "elsewhere"],
        "facts": {},
        "confidence": "high",
        "script": "alert(1)",
    }
    content = {
        "exception": {"type": "RuntimeError", "module": "builtins", "message": "mat1 and mat2"},
        "frames": [frame],
        "diagnosis": diagnosis,
        "step": 1,
    }
    h.hub.on_message(w(1), "exception", content)
    (exc,) = [m for m in h.out if m["method"] == "exception"]  # validated by broadcast
    assert "injected" not in exc["frames"][0] and exc["frames"][0]["lineno"] == 3
    got = exc["diagnosis"]
    assert "script" not in got
    if category == "not_a_category":
        assert got["category"] == "generic"
        assert got["headline"] == "RuntimeError: mat1 and mat2"
    else:
        assert (got["category"], got["headline"], got["links"]) == (
            category,
            "`x` is 4x3, `w` is 5x2",
            ["grads"],
        )


def test_a_silent_rank_is_lost_and_the_job_ends_with_one_more_message(h: Harness) -> None:
    for n in range(2):
        h.hello(n, world=2, key="kl")
    h.step_all(range(2), range(1, 3))
    h.tick()
    h.hub.on_message(w(0), "bye", {"state": "exited"})
    for _ in range(98):
        h.tick()
    assert h.alarms() == []
    h.tick(0.2)
    (alarm,) = h.alarms()
    assert (alarm["kind"], alarm["rank"]) == ("lost", 1) and "for 10 s" in alarm["message"]
    final = h.ranks_msgs()[-1]
    assert final["job"]["state"] == "ended"
    assert [r["state"] for r in final["ranks"]] == ["exited", "lost"]
    n = len(h.ranks_msgs())
    for _ in range(20):
        assert h.hub.tick() is False
        h.clock.t += 0.1
    assert len(h.ranks_msgs()) == n  # nothing changes: nothing more is sent


def test_messages_are_coalesced_to_at_most_ten_a_second(h: Harness) -> None:
    for n in range(4):
        h.hello(n)
    step = 0
    for _ in range(300):  # 3 s of 4 ranks sending rows every 10 ms, the flusher every 10 ms
        step += 1
        h.step_all(range(4), range(step, step + 1))
        h.tick(0.01)
    times = [t for t, m in zip(h.sent_at, h.out, strict=True) if m["method"] == "ranks"]
    assert 25 <= len(times) <= 31
    assert all(b - a >= 0.1 - 1e-9 for a, b in itertools.pairwise(times))
    n = len(h.ranks_msgs())
    for _ in range(50):  # nothing changes: nothing is sent
        h.tick(0.1)
    assert len(h.ranks_msgs()) <= n + 1  # the last queued points
    got = sorted(
        s for m in h.ranks_msgs() for p in m["points"] if p["rank"] == 0 for s in p["steps"]
    )
    assert got == list(range(1, step + 1))


# --- all-rank actions ----------------------------------------------------------------------


def auto_ack(
    h: Harness,
    skip: set[int] = frozenset(),
    refuse: dict[int, int] | None = None,
    late: set[int] = frozenset(),
) -> None:
    """Workers that answer a prepare at once (``skip``: never; ``late``: after 2x the
    timeout; ``refuse``: rank -> the step it is already at)."""

    def answer(worker: bytes, msg_type: str, content: dict[str, Any]) -> None:
        if msg_type != "prepare":
            return
        n = int(worker.decode().rsplit("-", 1)[1])
        at = (refuse or {}).get(n)
        ack = {
            "action_id": content["action_id"],
            "ok": at is None or at < content["at_step"],
            "step": at or 0,
            "reason": None if at is None else f"already at step {at}",
        }
        if n in skip:
            return
        if n in late:
            threading.Timer(0.6, h.hub.on_message, (worker, "ack", ack)).start()
            return
        h.hub.on_message(worker, "ack", ack)

    h.ep.answer = answer


def started(h: Harness, ranks: int = 2) -> ActionRegistry:
    for n in range(ranks):
        h.hello(n, world=ranks, key="ka")
    h.step_all(range(ranks), range(1, 21), dt=0.05)  # 20 steps/s: a margin of 20
    registry = ActionRegistry(h.errors.append)
    h.hub.actions.register(registry)
    return registry


def act(registry: ActionRegistry, action: str, args: dict[str, Any], rid: str) -> dict[str, Any]:
    reply = registry.handle({"method": "action", "request_id": rid, "action": action, "args": args})
    validate_kernel_message(reply)
    return reply


def test_clip_is_prepared_then_committed_at_one_step_on_every_rank(h: Harness) -> None:
    registry = started(h)
    auto_ack(h)
    reply = act(registry, "ranks_clip", {"max_norm": 1.5}, "req-1")
    assert reply["method"] == "ack" and reply["result"] == {"at_step": 40, "ranks": [0, 1]}
    prepares, commits = h.ep.of("prepare"), h.ep.of("commit")
    assert [p[0] for p in prepares] == [w(0), w(1)]
    assert prepares[0][2] == {
        "action_id": prepares[0][2]["action_id"],
        "action": "clip",
        "args": {"max_norm": 1.5},
        "at_step": 40,
    }
    assert [c[2]["action_id"] for c in commits] == [prepares[0][2]["action_id"]] * 2
    assert h.ep.of("cancel") == []
    pending = h.last()["job"]["pending"]
    assert pending == {"action": "clip", "at_step": 40, "request_id": "req-1"}
    # another action while one is pending is refused
    again = act(registry, "ranks_pause", {}, "req-2")
    assert again["code"] == "refused" and "pending at step 40" in again["message"]
    for n in range(2):
        h.hub.on_message(w(n), "applied", {"action_id": commits[0][2]["action_id"], "step": 40})
    msg = h.last()
    assert msg["job"]["pending"] is None and [r["clip"] for r in msg["ranks"]] == [1.5, 1.5]


def test_a_silent_rank_refuses_the_action_and_cancels_it_everywhere(h: Harness) -> None:
    registry = started(h, ranks=3)
    auto_ack(h, skip={2})
    reply = act(registry, "ranks_scale_lr", {"factor": 0.5}, "req-3")
    assert reply["method"] == "error" and reply["code"] == "refused"
    assert "rank 2 did not answer within 0.3 s" in reply["message"]
    assert "nothing applied" in reply["message"]
    assert sorted(c[0] for c in h.ep.of("cancel")) == [w(0), w(1), w(2)]
    assert h.ep.of("commit") == []
    (alarm,) = h.alarms("action")
    assert alarm["rank"] == 2 and "scale_lr" in alarm["message"]
    assert h.last()["job"]["pending"] is None


def test_a_late_ack_does_not_count(h: Harness) -> None:
    registry = started(h)
    auto_ack(h, late={1})
    reply = act(registry, "ranks_pause", {}, "req-4")
    assert reply["code"] == "refused" and "rank 1 did not answer" in reply["message"]
    threading.Event().wait(0.5)  # the late ack arrives now, and changes nothing
    assert h.ep.of("commit") == [] and h.last()["job"]["pending"] is None


def test_a_rank_already_past_the_step_is_asked_again_further_ahead(h: Harness) -> None:
    registry = started(h)
    auto_ack(h, refuse={1: 45})
    reply = act(registry, "ranks_unclip", {}, "req-5")
    assert reply["method"] == "ack" and reply["result"]["at_step"] == 45 + 2 * 20
    assert len(h.ep.of("prepare")) == 4 and len(h.ep.of("cancel")) == 2


def test_actions_are_refused_without_a_job_and_check_their_arguments(h: Harness) -> None:
    registry = ActionRegistry(h.errors.append)
    h.hub.actions.register(registry)
    reply = act(registry, "ranks_clip", {"max_norm": 1.0}, "r1")
    assert reply["code"] == "refused" and "no multi-process job is running" in reply["message"]
    assert act(registry, "ranks_clip", {"max_norm": 0}, "r2")["code"] == "invalid_args"
    assert act(registry, "ranks_scale_lr", {"factor": 5000}, "r3")["code"] == "invalid_args"
    assert act(registry, "ranks_resume", {"x": 1}, "r4")["code"] == "invalid_args"


def test_pause_then_resume(h: Harness) -> None:
    registry = started(h)
    auto_ack(h)
    assert act(registry, "ranks_resume", {}, "r0")["code"] == "refused"  # nothing paused
    reply = act(registry, "ranks_pause", {}, "r1")
    at = reply["result"]["at_step"]
    action_id = h.ep.of("commit")[0][2]["action_id"]
    h.hub.on_message(w(0), "applied", {"action_id": action_id, "step": at})
    assert h.last()["job"]["pending"] is not None  # rank 1 not held yet
    h.hub.on_message(w(1), "applied", {"action_id": action_id, "step": at})
    for n in range(2):
        h.beat(n, at - 1, 0.5, "paused")
    msg = h.last()
    assert msg["job"]["paused_at"] == at and msg["job"]["pending"] is None
    assert [r["state"] for r in msg["ranks"]] == ["paused", "paused"]
    reply = act(registry, "ranks_resume", {}, "r2")
    assert reply["result"] == {"ranks": [0, 1]}
    assert [s[0] for s in h.ep.of("resume")] == [w(0), w(1)]
    assert h.last()["job"]["paused_at"] is None


def test_a_rank_failing_on_its_own_is_listed_before_a_peer_it_took_down(h: Harness) -> None:
    for n in range(2):
        h.hello(n, world=2, key="kr")
    h.step_all(range(2), range(1, 4))
    gloo = {
        "exception": {
            "type": "RuntimeError",
            "module": "builtins",
            "message": "Connection closed by peer",
            "message_truncated": False,
        },
        "frames": [
            {
                "position": 0,
                "origin": "library",
                "user": False,
                "function": "backward",
                "file": "torch/autograd/graph.py",
                "lineno": 824,
                "line": "return f()",
                "locals": [],
                "locals_total": 0,
                "locals_truncated": False,
            }
        ],
        "diagnosis": None,
    }
    own = {
        "exception": {
            "type": "ValueError",
            "module": "builtins",
            "message": "bad batch",
            "message_truncated": False,
        },
        "frames": [],
        "diagnosis": None,
    }
    h.hub.on_message(w(0), "exception", gloo)  # the consequence arrives first
    h.clock.t += 0.2
    h.hub.on_message(w(1), "exception", own)
    first, second = h.alarms("failed")
    assert (first["rank"], second["rank"]) == (1, 0)
    assert "ValueError: bad batch" in first["message"]
    assert "another rank failed first" in second["message"]
    assert [m["rank"]["rank"] for m in h.out if m["method"] == "exception"] == [0, 1]
    # the launcher's cell then fails: the failing rank's exception goes out again, newest
    ProcessRaisedException = type("ProcessRaisedException", (Exception,), {})
    h.hub.cell_failed(ProcessRaisedException("process 1 terminated"))
    *_, again = [m for m in h.out if m["method"] == "exception"]
    assert again["rank"]["rank"] == 1 and again["exception"]["type"] == "ValueError"
    assert again["id"] not in {m["id"] for m in h.out[:-1] if m["method"] == "exception"}
    h.hub.cell_failed(KeyError("not a launcher's"))
    assert h.out[-1] is again


def test_a_rank_that_attaches_after_the_other_ended_joins_the_same_job(h: Harness) -> None:
    h.hello(1, world=2, key="kw")
    h.rows(1, range(1, 4), norm=1.0)
    h.hub.on_message(w(1), "bye", {"state": "exited"})
    h.tick()
    assert h.last()["job"]["state"] == "running"  # rank 0 has not said hello yet
    h.hello(0, world=2, key="kw")
    h.rows(0, range(1, 4), norm=2.0)
    h.hub.on_message(w(0), "bye", {"state": "exited"})
    h.tick()
    msg = h.last()
    assert msg["job"]["id"] == 1 and msg["job"]["state"] == "ended"
    assert [(r["identity"]["rank"], r["step"]) for r in msg["ranks"]] == [(0, 3), (1, 3)]
    assert [(a["kind"], a["rank"]) for a in msg["alarms"]] == [("desync", 1)]


def test_a_hello_with_the_fallback_world_size_joins_its_rendezvous(h: Harness) -> None:
    h.hello(1, world=2, key="127.0.0.1:29511:2")
    h.hello(0, world=1, key="127.0.0.1:29511:1")  # before its process group was up
    msg = h.last()
    assert msg["job"]["id"] == 1 and msg["job"]["world_size"] == 2
    assert [r["identity"]["rank"] for r in msg["ranks"]] == [0, 1]


def test_r56_a_refused_hello_takes_the_slot_only_once_its_holder_is_lost(h: Harness) -> None:
    # a live rank's slot is its own; a restarted process for the same rank (its holder
    # gone without a word, on another host) gets it once the holder is lost, if it is
    # still heard; one that said bye is never admitted
    h.hello(0, world=2, key="kh")
    other, gone = b"worker-new", b"worker-gone"
    identity = {
        "rank": 0,
        "world_size": 2,
        "local_rank": 0,
        "host": "node1",
        "pid": 77,
        "launcher": "torchrun",
    }
    for worker in (other, gone):
        h.hub.on_message(worker, "hello", {"identity": identity, "job_key": "kh"})
    assert h.hub.refused_hellos == 2
    assert (
        list(h.hub.refusals) == ["rank 0 is held by pid 4000 on node0, whose worker is alive"] * 2
    )
    assert [s[2]["reason"] for s in h.ep.of("refused")] == [h.hub.refusals[0]] * 2
    h.hub.on_message(gone, "bye", {"state": "exited"})
    beat = {"step": 0, "since_step_s": None, "phase": "user"}
    h.ep.sent.clear()
    for _ in range(150):  # both beat: the holder keeps its slot
        h.tick()
        h.beat(0, 0, 0.0, "user")
        h.hub.on_message(other, "heartbeat", beat)
    assert [r["identity"]["pid"] for r in h.last()["ranks"]] == [4000]
    assert h.ep.of("config") == [] and h.hub.refused_hellos == 2 + 1 + 150
    for _ in range(101):  # the holder falls silent: lost after 10 s, then the slot is free
        h.tick()
        h.hub.on_message(other, "heartbeat", beat)
    ranks = h.last()["ranks"]
    assert [(r["identity"]["pid"], r["state"]) for r in ranks] == [(77, "starting")]
    assert [s[0] for s in h.ep.of("config")] == [other]  # admitted; never the one gone
    assert not h.errors
