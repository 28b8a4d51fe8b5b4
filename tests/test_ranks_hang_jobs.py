"""Collective-level hang diagnosis on real gloo jobs (issue #25 part 2, R57).

Real ranks (``mp.spawn`` on CPU, gloo) attach to a real ``Endpoint`` in the test process
whose messages feed a real ``RankHub`` (the kernel's aggregator, ticked here): the
workers, their flight recorders, their heartbeats and the kernel's merge all run as in a
notebook. One rank never enters the collective the others wait in:

- three ranks all-reduce a [1024] float32 tensor by hand each step; rank 1 sleeps in its
  dataset's ``__getitem__``: the alarm names all_reduce, its seq and group, rank 1 as the
  rank that never entered it, with its stack at ``__getitem__``; again with torch's
  recorder turned off (``TORCH_FR_BUFFER_SIZE=0``): the op from the stack, the seq from
  the group's own counter, and the alarm says so;
- a DDP job where rank 1 sleeps before backward while rank 0 is in backward, in DDP's
  gradient all-reduce (its C++ reducer: no Python call to wrap): the same, marked as
  DDP's gradient all-reduce;
- attaching adds no collective (torch's own per-group counter is the same with and
  without the tool) and the trained weights are bit-identical.

Every message the hub broadcasts is validated against the schema.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from kernel_client import validate_kernel_message

from jupyterlab_torchdbg.ranks.kernel import worker_env
from jupyterlab_torchdbg.ranks.kernel.aggregator import RankHub
from jupyterlab_torchdbg.ranks.kernel.endpoint import Endpoint

HERE = Path(__file__).parent
#: Generous: three processes importing torch on two busy cores, then the hang.
JOB_S = 240.0


@pytest.fixture
def rw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``ranks_workers`` imported from a copy in tmp_path (spawned ranks import it there)."""
    shutil.copy(HERE / "ranks_workers.py", tmp_path / "ranks_workers_hang.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    module = importlib.import_module("ranks_workers_hang")
    yield module
    sys.modules.pop("ranks_workers_hang", None)


class Kernel:
    """The kernel's side: an endpoint feeding a RankHub with a short hang threshold."""

    def __init__(self, hang_s: float = 2.0) -> None:
        self.out: list[dict[str, Any]] = []
        self.hub = RankHub(self.broadcast, lambda e: None, "hangtest", threaded=False)
        self.hub.hang_s = hang_s
        self.ep = Endpoint(self.hub.on_message)
        self.hub.endpoint = self.ep

    def broadcast(self, msg: dict[str, Any]) -> None:
        validate_kernel_message(msg)
        self.out.append(msg)

    def hangs(self) -> list[dict[str, Any]]:
        msg = self.hub.message()
        validate_kernel_message(msg)
        return [a for a in msg["alarms"] if a["kind"] == "hang"]

    def until_hang(self, ctx: Any) -> dict[str, Any]:
        deadline = time.monotonic() + JOB_S
        while time.monotonic() < deadline:
            self.hub.tick()
            hangs = self.hangs()
            if hangs:
                return hangs[0]
            if all(not p.is_alive() for p in ctx.processes):
                break
            time.sleep(0.1)
        raise AssertionError(f"no hang alarm: {self.hub.message()}")

    def close(self) -> None:
        self.ep.close()


def _run(rw: Any, k: Kernel, world: int, mode: str) -> dict[str, Any]:
    cleanup = worker_env.install(k.ep.address, k.ep.key)
    try:
        ctx = rw.spawn_hang(world, mode)
    finally:
        cleanup()
    try:
        alarm = k.until_hang(ctx)
        deadline = time.monotonic() + JOB_S
        while not ctx.join(timeout=1.0):  # rank 1 wakes up and the job ends normally
            assert time.monotonic() < deadline, "the job did not end"
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    return alarm


@pytest.mark.parametrize("recorder", [True, False], ids=["recorder", "recorder-off"])
def test_the_rank_sleeping_in_its_data_loading_never_entered_the_all_reduce(
    rw: Any, recorder: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not recorder:  # the ranks inherit it: torch records nothing
        monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "0")
    k = Kernel()
    try:
        alarm = _run(rw, k, 3, "loader")
    finally:
        k.close()
    c = alarm["collective"]
    assert alarm["rank"] == 1
    shapes = "[1024] float32" if recorder else None  # the sequence counter has no shapes
    source = "flight_recorder" if recorder else "sequence"
    assert (c["op"], c["group"], c["shapes"], c["source"]) == (
        "all_reduce",
        "default",
        shapes,
        source,
    )
    assert c["ranks_in"] == [0, 2] and c["never_entered"] == [1]
    assert c["ddp_backward"] is False
    msg = alarm["message"]
    label = f"all_reduce (seq {c['seq']}, default group" + (f", {shapes})" if shapes else ")")
    assert f"Ranks 0, 2 are in {label}" in msg
    assert "rank 1 never entered it" in msg
    last = "all_reduce" if recorder else "a collective"  # its last one, the step before
    assert f"finished {last} seq {c['seq'] - 1}" in msg
    assert ("flight recorder was off" in msg) is not recorder
    assert "in __getitem__" in msg and "time.sleep(HANG_S)" in msg
    by_ranks = {tuple(m["ranks"]): m for m in alarm["merged"]}
    assert by_ranks[(0, 2)]["where"].endswith("in hang")  # dist.all_reduce(t) in hang()
    assert by_ranks[(0, 2)]["in"].startswith("all_reduce (seq")
    assert by_ranks[(1,)]["where"].endswith("in __getitem__")
    assert by_ranks[(1,)]["in"] is None
    assert alarm["stack"][alarm["stack_user"] - 1].split(": ", 1)[1].startswith("time.sleep(")


def test_a_ddp_rank_hanging_before_backward_never_entered_the_gradient_all_reduce(
    rw: Any,
) -> None:
    k = Kernel()
    try:
        alarm = _run(rw, k, 2, "ddp")
    finally:
        k.close()
    c = alarm["collective"]
    assert alarm["rank"] == 1
    assert (c["op"], c["group"], c["ranks_in"], c["never_entered"]) == (
        "all_reduce",
        "default",
        [0],
        [1],
    )
    assert c["ddp_backward"] is True  # issued by DDP's C++ reducer, inside backward
    assert c["shapes"] == "[9216] float32"  # the one bucket: 8 x 1024 weights + 1024 biases
    assert "DDP's gradient all-reduce in backward" in alarm["message"]
    assert "rank 1 never entered it" in alarm["message"]
    assert "It is in " in alarm["message"] and "time.sleep(HANG_S)" in alarm["message"]


def test_attaching_adds_no_collective_and_changes_no_weight(rw: Any, tmp_path: Path) -> None:
    runs = {}
    for attached in (False, True):
        out = tmp_path / f"out-{attached}"
        out.mkdir()
        k = Kernel() if attached else None
        cleanup = worker_env.install(k.ep.address, k.ep.key) if k is not None else None
        try:
            rw.spawn(2, 30, "ok", str(out))
        finally:
            if cleanup is not None:
                cleanup()
        if k is not None:
            k.hub.tick()
            ranks = k.hub.message()["ranks"]
            k.close()
            assert sorted(r["identity"]["rank"] for r in ranks) == [0, 1]  # it did attach
            assert all(r["step"] == 30 for r in ranks)
        seqs = [int((out / f"rank{r}.seq").read_text()) for r in range(2)]
        runs[attached] = (seqs, [torch.load(out / f"rank{r}.pt") for r in range(2)])
    (plain_seqs, plain), (seqs, weights) = runs[False], runs[True]
    assert seqs == plain_seqs  # no collective added (torch's own per-group counter)
    assert seqs[0] > 30  # DDP's all-reduce at every step is counted
    for a, b in zip(plain, weights, strict=True):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[key], b[key]) for key in a)
