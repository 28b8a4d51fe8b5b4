"""Multi-process training from a real kernel (issue #15; PROTOCOL.md "Ranks").

A real ipykernel with ``%load_ext jupyterlab_torchdbg`` starts DDP jobs (gloo, CPU) the
ways a notebook does: ``torch.multiprocessing.spawn`` (2 and 4 ranks), a fork launcher
(``start_processes(start_method="fork")``, as accelerate's ``notebook_launcher``) and
``!torchrun --nproc_per_node 2``; the workers attach by themselves. The panel's comm (on a
subshell, as JupyterLab's) must get ``ranks`` messages with every rank stepping and equal
norms at each step; one misbehaving rank must be named by the right alarm (an exception
with its rank, a hang with its stack, a straggler, a desync); ``ranks_clip`` must apply at
one step on every rank (replicas bit-identical after); a worker with a wrong key must be
refused. The worker functions are in ``ranks_workers.py``, copied to ``tmp_path`` and
imported from there. Every comm message is validated against the schema (kernel_client).
Several jobs share one kernel per test (spawning and importing torch dominate).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from kernel_client import KernelDriver

HERE = Path(__file__).parent
#: Generous: several processes importing torch on two busy cores.
JOB_S = 420.0


async def start(k: KernelDriver, tmp_path: Path) -> tuple[str, str]:
    """Load the extension, import the workers' module, open the panel's comm on a subshell."""
    shutil.copy(HERE / "ranks_workers.py", tmp_path / "ranks_workers.py")
    await k.run(
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import torch\nimport ranks_workers as rw\n%load_ext jupyterlab_torchdbg\n"
        "from jupyterlab_torchdbg.kernel.extension import current\nhub = current().ranks"
    )
    sub = await k.create_subshell()
    comm = await k.open_comm(subshell_id=sub)
    return comm, sub


def ranks_msgs(k: KernelDriver, comm: str, job: int | None = None) -> list[dict[str, Any]]:
    return [
        m.data
        for m in k.messages("ranks", comm)
        if m.data["job"] is not None and (job is None or m.data["job"]["id"] == job)
    ]


def last_job(k: KernelDriver, comm: str) -> int:
    msgs = ranks_msgs(k, comm)
    return int(msgs[-1]["job"]["id"]) if msgs else 0


def latest(k: KernelDriver, comm: str, job: int) -> dict[str, Any] | None:
    msgs = ranks_msgs(k, comm, job)
    return msgs[-1] if msgs else None


def ended(k: KernelDriver, comm: str, job: int) -> bool:
    msg = latest(k, comm, job)
    return msg is not None and msg["job"]["state"] == "ended"


async def until(k: KernelDriver, comm: str, predicate: Any, timeout: float = 30) -> None:
    """Pump until ``predicate()``, else fail with each job's last state."""
    try:
        await k.pump_until(predicate, timeout=timeout)
    except TimeoutError:
        errors = await k.value("dict(current().errors)")
        raise AssertionError(f"not reached:\n{summary(k, comm)}\n{errors}") from None


async def wait_ended(k: KernelDriver, comm: str, job: int) -> None:
    """Until the job's ranks have all ended (their last messages are in)."""
    try:
        await k.pump_until(lambda: ended(k, comm, job), timeout=30)
    except TimeoutError:
        errors = await k.value("dict(current().errors)")
        raise AssertionError(f"job {job} did not end:\n{summary(k, comm)}\n{errors}") from None


def finished(k: KernelDriver, msg_id: str) -> bool:
    """The cell sent with ``start_execute`` has finished (its idle status came)."""
    return any(
        m["msg_type"] == "status"
        and m["parent_header"].get("msg_id") == msg_id
        and m["content"]["execution_state"] == "idle"
        for m in k.iopub
    )


async def while_running(k: KernelDriver, comm: str, msg_id: str, predicate: Any) -> None:
    """Pump until ``predicate()``; fail at once (with what the cell printed) if the cell
    ends first."""
    await k.pump_until(lambda: predicate() or finished(k, msg_id), timeout=JOB_S)
    if not predicate():
        r = await k.wait_execute(msg_id, 10)
        jobs = await k.value(
            "[(j.id, j.key, j.ended, [(r.number, r.identity['pid'], r.step, r.ended) "
            "for r in j.ordered()]) for j in hub.jobs], dict(current().errors), "
            "hub.worker_messages"
        )
        tb = "\n".join("\n".join(e.get("traceback", [])) for e in r.errors)
        raise AssertionError(
            f"the cell ended first:\n{r.stdout}\n{r.stderr}\n{tb}\n{summary(k, comm)}\n{jobs}"
        )


def summary(k: KernelDriver, comm: str) -> str:
    """Each job's last state, for a failing assertion's message."""
    out = []
    for job in sorted({m["job"]["id"] for m in ranks_msgs(k, comm)}):
        m = latest(k, comm, job)
        assert m is not None
        ranks = [
            (r["identity"]["rank"], r["identity"]["pid"], r["state"], r["step"]) for r in m["ranks"]
        ]
        kinds = [(a["kind"], a["rank"]) for a in m["alarms"]]
        out.append(f"job {job} {m['job']['state']}: {ranks} {kinds}")
    return "\n".join(out)


def alarms(k: KernelDriver, comm: str, job: int, kind: str) -> list[dict[str, Any]]:
    msg = latest(k, comm, job)
    return [a for a in (msg or {}).get("alarms", []) if a["kind"] == kind]


def norms(k: KernelDriver, comm: str, job: int) -> dict[int, dict[int, Any]]:
    """rank -> step -> total norm, from every ``points`` the comm got for the job."""
    out: dict[int, dict[int, Any]] = {}
    for m in ranks_msgs(k, comm, job):
        for p in m["points"]:
            for s, v in zip(p["steps"], p["grad_norm"], strict=True):
                if v is not None:
                    out.setdefault(p["rank"], {})[s] = v
    return out


def assert_equal_norms(by_rank: dict[int, dict[int, Any]], world: int) -> None:
    assert sorted(by_rank) == list(range(world))
    common = set.intersection(*(set(v) for v in by_rank.values()))
    assert len(common) >= 5, by_rank
    for s in common:
        values = [by_rank[r][s] for r in range(world)]
        assert all(v == pytest.approx(values[0], rel=1e-6) for v in values), (s, values)


def stepping(k: KernelDriver, comm: str, job_above: int, world: int, min_step: int) -> bool:
    msg = latest(k, comm, last_job(k, comm))
    if msg is None or msg["job"]["id"] <= job_above or len(msg["ranks"]) < world:
        return False
    return all(r["step"] >= min_step for r in msg["ranks"])


async def start_job(
    k: KernelDriver, tmp_path: Path, steps: int, mode: str
) -> tuple[str, str, Path, str, int, dict[str, Any]]:
    """Start a 2-rank ``mp.spawn`` job saving its weights; once both ranks are past step
    5: the comm, its subshell, the weights' folder, the cell's msg id, the job and its
    latest state (running, ranks 0 and 1)."""
    comm, sub = await start(k, tmp_path)
    out = tmp_path / "weights"
    out.mkdir()
    mid = k.start_execute(f"rw.spawn(2, {steps}, {mode!r}, {str(out)!r})")
    await while_running(k, comm, mid, lambda: stepping(k, comm, 0, 2, 5))
    job = last_job(k, comm)
    live = latest(k, comm, job)
    assert live is not None and live["job"]["state"] == "running"
    assert [r["identity"]["rank"] for r in live["ranks"]] == [0, 1]
    return comm, sub, out, mid, job, live


async def test_spawned_ranks_stream_live_with_equal_norms_and_clip_at_one_step(
    kernel: KernelDriver, tmp_path: Path
) -> None:
    k = kernel
    # 2 ranks via mp.spawn; while they train, the panel clips every rank at one step
    comm, sub, out, mid, job, live = await start_job(k, tmp_path, 300, "slow")
    assert {r["identity"]["launcher"] for r in live["ranks"]} == {"spawn"}
    reply = await k.action(comm, "ranks_clip", {"max_norm": 0.05}, subshell_id=sub)
    assert reply["method"] == "ack", reply
    at = reply["result"]["at_step"]
    assert reply["result"]["ranks"] == [0, 1] and at > max(r["step"] for r in live["ranks"])
    r = await k.wait_execute(mid, JOB_S)
    assert r.ok, r.errors
    assert await k.value(f"rw.same_weights({str(out)!r}, 2)") == "True"
    await wait_ended(k, comm, job)
    final = latest(k, comm, job)
    assert final is not None
    assert [(s["state"], s["step"], s["clip"]) for s in final["ranks"]] == [
        ("exited", 300, 0.05),
        ("exited", 300, 0.05),
    ]
    assert_equal_norms(norms(k, comm, job), 2)
    assert final["alarms"] == []
    # each rank's per-layer norms (for the desync check) are named at every sampled step
    # the kernel keeps, though a worker names its layers in one report of 16 (the others
    # name the layout); the panel's messages carry none
    kept = json.loads(
        await k.value(
            "__import__('json').dumps([[r.layers_at(s) for s in r._layers_sent] "
            f"for r in next(j for j in hub.jobs if j.id == {job}).ordered()])"
        )
    )
    assert [len(steps) for steps in kept] == [16, 16]
    for steps in kept:
        assert all(x["names"] == ["model.0", "model.2"] for x in steps), steps
        assert all(v > 0 for x in steps for v in x["norms"]), steps
        assert len({tuple(x["norms"]) for x in steps}) == 16  # they move
    assert not any("layers" in r for m in ranks_msgs(k, comm, job) for r in m["ranks"])
    # coalesced: at most 10 ranks messages a second to the panel
    times = [m.t for m in k.messages("ranks", comm) if (m.data["job"] or {}).get("id") == job]
    assert len(times) <= 10 * (times[-1] - times[0]) + 3  # (arrival times: a little jitter)

    # 4 ranks via mp.spawn: all of them stepping, the same norms
    await k.run("rw.spawn(4, 30)", timeout=JOB_S)
    await k.pump_until(lambda: latest(k, comm, job + 1) is not None, timeout=30)
    await wait_ended(k, comm, job + 1)
    four = latest(k, comm, job + 1)
    assert four is not None and four["job"]["world_size"] == 4
    assert [(s["identity"]["rank"], s["step"]) for s in four["ranks"]] == [
        (n, 30) for n in range(4)
    ]
    assert_equal_norms(norms(k, comm, job + 1), 4)
    assert not [a for a in four["alarms"] if a["kind"] != "straggler"]  # 4 on 2 busy cores


async def test_fork_and_torchrun_workers_attach_and_a_wrong_key_is_refused(
    kernel: KernelDriver, tmp_path: Path
) -> None:
    k = kernel
    comm, _ = await start(k, tmp_path)
    await k.run("rw.fork(2, 20)", timeout=JOB_S)
    await k.pump_until(lambda: last_job(k, comm) >= 1, timeout=30)
    await wait_ended(k, comm, 1)
    forked = latest(k, comm, 1)
    assert forked is not None
    assert [(s["identity"]["launcher"], s["step"]) for s in forked["ranks"]] == [("fork", 20)] * 2
    assert_equal_norms(norms(k, comm, 1), 2)

    torchrun = shutil.which("torchrun") or f"{sys.executable} -m torch.distributed.run"
    r = await k.run(
        f"!cd {tmp_path} && {torchrun} --nproc_per_node 2 ranks_workers.py 20", timeout=JOB_S
    )
    await k.pump_until(lambda: last_job(k, comm) >= 2, timeout=30)
    await wait_ended(k, comm, 2)
    ran = latest(k, comm, 2)
    assert ran is not None, r.stdout
    assert [(s["identity"]["launcher"], s["step"]) for s in ran["ranks"]] == [("torchrun", 20)] * 2
    assert_equal_norms(norms(k, comm, 2), 2)

    # a process with the endpoint but not the key: nothing it sends is accepted
    await k.run(
        "import os, subprocess\n"
        "env = dict(os.environ, TORCHDBG_KEY='ab' * 32)\n"
        "subprocess.run([sys.executable, '-c', 'import ranks_workers as rw; "
        f"rw.train(0, 1, rw.free_port(), 5)'], env=env, cwd={str(tmp_path)!r}, check=True)",
        timeout=JOB_S,
    )
    assert int(await k.value("hub.endpoint.refused")) > 0
    assert int(await k.value("len(hub.jobs)")) == 2
    late = await k.open_comm()
    await k.pump_until(lambda: bool(k.messages("ranks", late)))
    (replay,) = [m.data for m in k.messages("ranks", late)]
    assert replay["replay"] is True and replay["endpoint"]["refused"] > 0
    assert replay["job"]["id"] == 2


async def test_a_failing_a_hanging_a_straggling_and_a_desynced_rank_are_named(
    kernel: KernelDriver, tmp_path: Path
) -> None:
    k = kernel
    comm, _ = await start(k, tmp_path)
    # a rank that raises: the panel's exception message names it
    r = await k.execute("rw.spawn(2, 20, 'raise')", timeout=JOB_S)
    assert not r.ok

    def rank_1_raised() -> list[dict[str, Any]]:
        msgs = [m.data for m in k.messages("exception", comm)]
        return [m for m in msgs if m.get("rank", {}).get("rank") == 1]

    await k.pump_until(lambda: bool(rank_1_raised()), timeout=30)
    exc = rank_1_raised()[0]  # (rank 0 may raise too: its peer went away)
    assert exc["rank"]["world_size"] == 2 and exc["debuggable"] is False
    assert exc["exception"]["type"] == "RuntimeError"
    assert exc["exception"]["message"] == "boom on rank 1"
    assert any("boom on rank 1" in f["line"] for f in exc["frames"])
    # the stack starts at the user's rank function, not at our mp.spawn wrapper
    assert not any("mp_wrap" in f["file"] for f in exc["frames"]), exc["frames"]
    # the cell's own exception (torch's ProcessRaisedException) came first: the last
    # exception the panel got is the rank's
    await k.pump_until(lambda: k.messages("exception", comm)[-1].data.get("rank") is not None)
    assert k.messages("exception", comm)[-1].data["rank"]["rank"] == 1
    job = last_job(k, comm)
    await until(k, comm, lambda: bool(alarms(k, comm, job, "failed")))
    assert next(a["rank"] for a in alarms(k, comm, job, "failed")) == 1

    # a rank that sleeps in its own code: a hang alarm with its stack
    await k.run("hub.hang_s = 3.0")
    mid = k.start_execute("rw.spawn(2, 8, 'sleep')")
    await while_running(k, comm, mid, lambda: last_job(k, comm) > job)
    job += 1
    await while_running(k, comm, mid, lambda: bool(alarms(k, comm, job, "hang")))
    (hang,) = alarms(k, comm, job, "hang")
    assert hang["rank"] == 1 and hang["step"] == 4
    assert "rank 1 has not stepped for" in hang["message"]
    assert "rank 0 wait" in hang["message"]
    assert any("rank 1 hangs here" in line for line in hang["stack"]), hang["stack"]
    # issue #22: the user's frames first (the rank's function), the library's and the
    # tool's (multiprocessing, torch's spawn, our wrapper) after them
    n_user = hang["stack_user"]
    assert n_user >= 1 and all("ranks_workers.py" in ln for ln in hang["stack"][:n_user])
    assert "rank 1 hangs here" in hang["stack"][n_user - 1]
    assert any("multiprocessing" in ln for ln in hang["stack"][n_user:]), hang["stack"]
    assert not any("mp_wrap" in ln for ln in hang["stack"][:n_user])
    assert "ranks_workers.py" in hang["message"] and "rank 1 hangs here" in hang["message"]
    now = latest(k, comm, job)
    assert now is not None
    states = {s["identity"]["rank"]: s["state"] for s in now["ranks"]}
    assert states == {0: "waiting", 1: "stalled"}
    assert (await k.wait_execute(mid, JOB_S)).ok

    # a straggler: rank 1 does 150 ms more of its own work every step
    await k.run("hub.hang_s = 10.0\nrw.spawn(2, 25, 'straggle')", timeout=JOB_S)
    job += 1
    await wait_ended(k, comm, job)
    (slow,) = alarms(k, comm, job, "straggler")
    assert slow["rank"] == 1 and "rank 1 spends" in slow["message"]
    assert not alarms(k, comm, job, "desync") and not alarms(k, comm, job, "hang")

    # a desync: rank 1 alters its gradients after the all-reduce
    await k.run("rw.spawn(2, 20, 'desync')", timeout=JOB_S)
    job += 1
    await wait_ended(k, comm, job)
    (desync,) = alarms(k, comm, job, "desync") or [summary(k, comm)]
    assert desync["rank"] == 1 and desync["step"] >= 6
    assert f"rank 1's gradient norm at step {desync['step']}" in desync["message"]
    assert desync["layer"] in ("model.0", "model.2", None), desync


async def test_a_ddp_loop_without_an_optimizer_is_followed_at_the_end_of_backward(
    kernel: KernelDriver, tmp_path: Path
) -> None:
    # weights updated by hand (p -= lr * p.grad), the model called with keywords: each
    # rank's steps are its backward passes, read after DDP's all-reduce (equal norms
    # although each rank has its own data); clip applies at one step on every rank;
    # scaling the LR is refused with the reason (no optimizer)
    k = kernel
    comm, sub, out, mid, job, _ = await start_job(k, tmp_path, 200, "manual-slow")
    reply = await k.action(comm, "ranks_scale_lr", {"factor": 0.5}, subshell_id=sub)
    assert reply["method"] == "error" and reply["code"] == "refused", reply
    assert "no optimizer" in reply["message"], reply
    reply = await k.action(comm, "ranks_clip", {"max_norm": 0.05}, subshell_id=sub)
    assert reply["method"] == "ack", reply
    r = await k.wait_execute(mid, JOB_S)
    assert r.ok, r.errors
    assert await k.value(f"rw.same_weights({str(out)!r}, 2)") == "True"
    await wait_ended(k, comm, job)
    final = latest(k, comm, job)
    assert final is not None
    # every backward pass is a step: 200 iterations, 200 steps (R56)
    assert [(s["state"], s["step"], s["clip"]) for s in final["ranks"]] == [
        ("exited", 200, 0.05),
        ("exited", 200, 0.05),
    ], summary(k, comm)
    assert_equal_norms(norms(k, comm, job), 2)
    # the only alarms: the refusal, per rank, with its reason
    assert {(a["kind"], a["rank"]) for a in final["alarms"]} == {("action", 0), ("action", 1)}
    assert all("no optimizer" in a["message"] for a in final["alarms"]), final["alarms"]
