"""Collective-level hang diagnosis, the kernel's merge (issue #25 part 2, R57).

A ``RankHub`` fed heartbeats as the workers send them once they have not stepped: each
with its stack and the collectives its flight recorder holds (worker/collectives.py).
The hang alarm must name the collective most ranks wait in (op, seq, group, shapes) and
the rank that never entered it (a lower seq, or none), blame that rank even when it is
not in its own code, merge the ranks' stacks by their innermost own frame, say when the
source was the sequence number rather than the recorder, and wait (bounded) for every
rank's collectives before raising. Every message is validated against the schema. The
worker side on a real (one-rank) gloo group: the recorder's newest entry (op, seq, group,
shapes) and, with the recorder turned off, torch's own sequence counter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from test_ranks_job import Harness

from jupyterlab_torchdbg.ranks.kernel.hang_diag import collective_of, diagnose, merged_stacks

WAIT = ["train.py:40 in step: dist.all_reduce(t)", "torch/distributed/c10d.py:9 in all_reduce: w"]
LOAD = ["train.py:38 in step: x = next(it)", "data.py:31 in __getitem__: time.sleep(60)"]
USER = [True, False]


def coll(seq: int, in_: bool, op: str = "all_reduce", group: str = "default", **kw: Any) -> Any:
    g = {
        "op": op,
        "seq": seq,
        "group": group,
        "shapes": "[1024] float32",
        "in": in_,
        "since_s": 1.0,
        "ranks": kw.pop("ranks", [0, 1, 2]),
    }
    return {"source": kw.pop("source", "flight_recorder"), "backward": False, "groups": [g]}


@pytest.fixture
def h() -> Harness:
    return Harness()


def _hung(h: Harness, beats: dict[int, tuple[str, Any, list[str], list[bool]]]) -> None:
    world = len(beats)
    for n in range(world):
        h.hello(n, world=world, key=f"k{world}")
    h.step_all(range(world), range(1, 5))
    h.hub.hang_s = 3.0
    h.clock.t += 3.5
    for n, (phase, c, stack, user) in beats.items():
        content = {"step": 4, "since_step_s": 3.5, "phase": phase, "stack": stack}
        content.update(stack_user=user, collective=c)
        h.hub.on_message(f"worker-{n}".encode(), "heartbeat", content)
    h.tick()


def test_the_alarm_names_the_collective_and_the_rank_that_never_entered_it(h: Harness) -> None:
    _hung(
        h,
        {
            0: ("torch_wait", coll(41, True), WAIT, USER),
            1: ("user", coll(40, False), ["train.py:38 in step: x", LOAD[1]], [True, True]),
            2: ("torch_wait", coll(41, True), WAIT, USER),
        },
    )
    (alarm,) = h.alarms("hang")
    assert alarm["rank"] == 1
    assert alarm["collective"] == {
        "op": "all_reduce",
        "seq": 41,
        "group": "default",
        "shapes": "[1024] float32",
        "ddp_backward": False,
        "ranks_in": [0, 2],
        "never_entered": [1],
        "source": "flight_recorder",
    }
    msg = alarm["message"]
    assert "while ranks 0, 2 wait in a collective" in msg
    assert "Ranks 0, 2 are in all_reduce (seq 41, default group, [1024] float32)" in msg
    assert (
        "rank 1 never entered it (rank 1's last on that group: finished all_reduce seq 40)" in msg
    )
    assert "It is in data.py:31 in __getitem__: time.sleep(60)" in msg
    assert alarm["merged"] == [
        {
            "ranks": [0, 2],
            "where": "train.py:40 in step",
            "in": "all_reduce (seq 41, default group, [1024] float32)",
        },
        {"ranks": [1], "where": "data.py:31 in __getitem__", "in": None},
    ]
    assert "Stacks: ranks 0, 2 at train.py:40 in step (in all_reduce" in msg


def test_a_rank_inside_torch_but_behind_is_blamed_not_the_ones_in_their_own_code(
    h: Harness,
) -> None:
    # rank 1 waits in an earlier collective (seq 40, a broadcast the others never made):
    # the phase alone would blame nobody in its own code; the seqs name it
    _hung(
        h,
        {
            0: ("torch_wait", coll(41, True), WAIT, USER),
            1: ("torch_wait", coll(40, True, op="broadcast"), WAIT, USER),
        },
    )
    (alarm,) = h.alarms("hang")
    assert alarm["rank"] == 1
    assert alarm["collective"]["never_entered"] == [1]
    assert "rank 1's last on that group: in broadcast seq 40" in alarm["message"]


def test_mismatched_ops_at_one_seq_and_a_silent_member_are_said(h: Harness) -> None:
    views = [
        (0, collective_of(coll(7, True, ranks=[0, 1, 2, 3])), WAIT, USER),
        (1, collective_of(coll(7, True, ranks=[0, 1, 2, 3])), WAIT, USER),
        (2, collective_of(coll(7, True, op="broadcast", ranks=[0, 1, 2, 3])), WAIT, USER),
    ]
    diag = diagnose(views)
    assert diag is not None
    assert diag["missing"] == []
    assert "rank 2 is in broadcast at the same seq (a mismatched collective)" in diag["sentence"]
    assert "rank 3 of its group sent nothing" in diag["sentence"]
    # a subgroup: rank 2 is not a member, so it is not blamed
    sub = [
        (0, collective_of(coll(3, True, group="tp", ranks=[0, 1])), WAIT, USER),
        (1, collective_of(coll(2, False, group="tp", ranks=[0, 1])), LOAD, [True, True]),
        (2, collective_of(coll(9, False, ranks=[0, 1, 2])), LOAD, [True, True]),
    ]
    diag = diagnose(sub)
    assert diag is not None and diag["missing"] == [1]
    assert [m["ranks"] for m in merged_stacks(sub, diag)] == [[0], [1, 2]]


def test_ddp_backward_and_the_sequence_fallback_are_told_truthfully(h: Harness) -> None:
    c = coll(5, True, source="sequence")
    c["backward"] = True
    c["groups"][0]["shapes"] = None
    views = [(0, collective_of(c), WAIT, USER), (1, collective_of(coll(4, False)), LOAD, USER)]
    diag = diagnose(views)
    assert diag is not None
    assert diag["collective"]["ddp_backward"] is True
    assert (
        "all_reduce (seq 5, default group, DDP's gradient all-reduce in backward)"
        in (diag["sentence"])
    )
    assert "flight recorder was off" in diag["sentence"]
    # a reduce-scatter in backward (FSDP's) is not called DDP's all-reduce
    c["groups"][0]["op"] = "reduce_scatter"
    diag = diagnose([(0, collective_of(c), WAIT, USER), views[1]])
    assert diag is not None and "DDP" not in diag["sentence"]
    assert "reduce_scatter (seq 5, default group, in backward)" in diag["sentence"]


def test_the_alarm_waits_for_every_ranks_collectives_then_goes_without(h: Harness) -> None:
    for n in range(2):
        h.hello(n, world=2, key="k2")
    h.step_all(range(2), range(1, 5))
    h.hub.hang_s = 3.0
    h.clock.t += 3.5
    content = {"step": 4, "since_step_s": 3.5, "phase": "torch_wait", "stack": WAIT}
    h.hub.on_message(b"worker-0", "heartbeat", {**content, "collective": coll(9, True)})
    h.hub.on_message(b"worker-1", "heartbeat", {"step": 4, "since_step_s": 3.5, "phase": "user"})
    h.tick()
    assert h.alarms() == []  # rank 1's collectives are on the way
    h.clock.t += 3.0
    h.tick()
    (alarm,) = h.alarms("hang")  # past the grace: rank 1 sent none, so it never entered
    assert alarm["rank"] == 1 and alarm["collective"]["never_entered"] == [1]


def test_malformed_collectives_from_the_wire_are_dropped() -> None:
    assert collective_of(None) is None
    assert collective_of({"groups": "x"}) is None
    got = collective_of(
        {
            "groups": [
                {"seq": -1, "group": "g"},
                {"seq": 1, "group": 5},
                "x",
                {"seq": 2, "group": "g" * 99, "ranks": [-1], "op": 7},
            ]
        }
    )
    assert got is not None
    assert got["groups"] == [
        {
            "op": None,
            "seq": 2,
            "group": "g" * 64,
            "shapes": None,
            "in": False,
            "since_s": None,
            "ranks": None,
        }
    ]


SNAPSHOT = """
import json, os, sys, tempfile
import torch, torch.distributed as dist
from jupyterlab_torchdbg.ranks.worker import collectives
store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
for _ in range(3):
    dist.all_reduce(torch.ones(5, dtype=torch.float64))
dist.broadcast(torch.zeros(2, 3, dtype=torch.int64), src=0)
print(json.dumps(collectives.snapshot(sys._getframe())))
dist.destroy_process_group()
"""


@pytest.mark.parametrize("recorder", [True, False])
def test_a_real_process_group_snapshot_from_the_recorder_or_the_sequence(recorder: bool) -> None:
    env = {k: v for k, v in os.environ.items() if "TRACE_BUFFER" not in k}
    env["TORCH_FR_BUFFER_SIZE"] = "2000" if recorder else "0"  # 2000: torch's default
    run = subprocess.run(
        [sys.executable, "-c", SNAPSHOT], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["backward"] is False
    (g,) = got["groups"]
    if recorder:
        assert got["source"] == "flight_recorder"
        assert (g["op"], g["group"], g["shapes"], g["in"]) == (
            "broadcast",
            "default",
            "[2x3] int64",
            False,
        )
        assert g["ranks"] == [0] and g["seq"] == 4
    else:  # the default group's own counter: 4 collectives, none running now
        assert got["source"] == "sequence"
        assert (g["op"], g["seq"], g["group"], g["in"]) == (None, 4, "default", False)
