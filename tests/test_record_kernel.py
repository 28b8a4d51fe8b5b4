"""The run record in real kernels (issue #24, R50/R51): a kernel killed while it trains
hands its run to the next kernel of the same notebook, with the cause read from the
system; a clean shutdown says so; another notebook sees nothing; a kernel killed by the
out-of-memory killer in a memory-limited cgroup is named as such (where this machine
lets a test make a cgroup)."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kernel_client import KernelDriver

TRAIN = """
import torch, time
from torch import nn
import jupyterlab_torchdbg as dbg
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for step in range(1, {steps} + 1):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    dbg.log(loss=loss)
    time.sleep(0.002)
"""


@pytest.fixture
def start(jp_start_kernel: Callable[..., Any], tmp_path: Path) -> Callable[[str], Any]:
    records = tmp_path / "records"

    async def make(notebook: str, **extra: str) -> tuple[Any, KernelDriver]:
        env = {
            **os.environ,
            "PYTHONWARNINGS": "ignore::DeprecationWarning",
            "OMP_NUM_THREADS": "1",
            "JPY_SESSION_NAME": str(tmp_path / notebook),
            "TORCHDBG_RECORD_DIR": str(records),
            **extra,
        }
        km, kc = await jp_start_kernel(env=env)
        return km, KernelDriver(kc)

    make.records = records  # type: ignore[attr-defined]
    return make


async def _record(kd: KernelDriver) -> dict[str, Any]:
    await kd.run("import torch\n%load_ext jupyterlab_torchdbg")
    comm = await kd.open_comm()
    await kd.pump_until(lambda: bool(kd.messages("record", comm)))
    return kd.messages("record", comm)[-1].data


async def _wait_record(
    kd: KernelDriver, comm: str, pred: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    await kd.pump_until(lambda: any(pred(m.data) for m in kd.messages("record", comm)), 15)
    return next(m.data for m in reversed(kd.messages("record", comm)) if pred(m.data))


async def test_a_kernel_killed_while_training_hands_its_run_to_the_next(start: Any) -> None:
    _km, first = await start("train.ipynb")
    await first.run("import torch\n%load_ext jupyterlab_torchdbg")
    pid = int(await first.value("__import__('os').getpid()"))
    await first.run(TRAIN.format(steps=300) + "\ntime.sleep(1.5)\n")
    # killed while the next cell trains (the record of 300 steps is at most a flush old)
    first.start_execute(TRAIN.format(steps=100000))
    await asyncio.sleep(1.0)
    os.kill(pid, signal.SIGKILL)
    _km2, second = await start("train.ipynb")
    await second.run("import torch\n%load_ext jupyterlab_torchdbg")
    comm = await second.open_comm()
    rec = await _wait_record(
        second, comm, lambda d: bool(d["kernels"]) and d["kernels"][0]["end"]["kind"] != "unknown"
    )
    assert rec["store"] == "on" and rec["notebook"] == "train.ipynb"
    dead = rec["kernels"][0]
    assert dead["end"]["kind"] == "signal" and dead["end"]["code"] == 9, dead
    assert dead["run"] == 2 and dead["step"] is not None and dead["step"] > 10, dead
    assert "of run 2 (killed by signal 9; memory" in dead["text"], dead["text"]
    assert dead["end"]["text"] == "killed by signal 9 (SIGKILL)"
    assert [r["id"] for r in dead["runs"]] == [1, 2]
    assert dead["runs"][0]["steps"] == 300
    # its first run, whole: 300 losses, the gradient norms
    reply = await second.action(comm, "open_record", {"kernel": dead["id"], "run": 1})
    assert reply["method"] == "ack", reply
    await second.pump_until(lambda: bool(second.messages("record_run", comm)))
    data = second.messages("record_run", comm)[-1].data
    series = {s["name"]: s for s in data["series"]}
    assert len(series["loss"]["x"]) == 300
    assert any(n.startswith("grad/") for n in series)
    assert any(n.startswith("mem/") for n in series)
    # unknown runs and this kernel's own id are refused, with the reason
    bad = await second.action(comm, "open_record", {"kernel": dead["id"], "run": 9})
    assert bad["method"] == "error" and "no run 9" in bad["message"]
    # dismissed: the record says so, and the next reader too
    ok = await second.action(comm, "dismiss_record", {"kernel": dead["id"]})
    assert ok["method"] == "ack"
    again = await _wait_record(
        second, comm, lambda d: bool(d["kernels"]) and d["kernels"][0]["dismissed"]
    )
    assert again["kernels"][0]["id"] == dead["id"]


async def test_a_clean_shutdown_says_so_and_another_notebook_sees_nothing(start: Any) -> None:
    km, first = await start("a.ipynb")
    await first.run("import torch\n%load_ext jupyterlab_torchdbg")
    await first.run(TRAIN.format(steps=20))
    await km.shutdown_kernel(now=False)
    _km2, second = await start("a.ipynb")
    rec = await _record(second)
    assert rec["kernels"][0]["end"]["kind"] == "shutdown", rec["kernels"][0]
    assert rec["kernels"][0]["text"].startswith("The kernel shut down")
    _km3, other = await start("b.ipynb")
    rec_b = await _record(other)
    assert rec_b["store"] == "on" and rec_b["kernels"] == []
    # R51: the folder and every file in it are the owner's only
    records: Path = start.records
    assert stat.S_IMODE(records.stat().st_mode) == 0o700
    for f in records.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f


async def test_no_notebook_no_record(jp_start_kernel: Callable[..., Any]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"}
    _km, kc = await jp_start_kernel(env=env)
    kd = KernelDriver(kc)
    rec = await _record(kd)
    assert rec["store"] == "off" and rec["kernels"] == []


def _memory_cgroup(limit: int) -> Path | None:
    """A new memory-limited cgroup (v2, else v1), or None where this machine allows none."""
    name = f"torchdbg-test-{uuid.uuid4().hex[:8]}"
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    try:
        if v2.exists() and "memory" in v2.read_text().split():
            cg = Path("/sys/fs/cgroup") / name
            cg.mkdir()
            (cg / "memory.max").write_text(str(limit))
            (cg / "memory.swap.max").write_text("0")
            return cg
        root = Path("/sys/fs/cgroup/memory")
        if root.is_dir():
            cg = root / name
            cg.mkdir()
            (cg / "memory.limit_in_bytes").write_text(str(limit))
            try:
                (cg / "memory.memsw.limit_in_bytes").write_text(str(limit))
            except OSError:
                pass
            return cg
    except OSError:
        return None
    return None


async def test_a_kernel_killed_by_the_oom_killer_is_named(start: Any) -> None:
    cg = _memory_cgroup(600 * 2**20)
    if cg is None:
        pytest.skip("this machine does not let a test create a memory-limited cgroup")
    try:
        _km, first = await start("oom.ipynb")
        pid = int(await first.value("__import__('os').getpid()"))
        # the kernel moves into the limited cgroup before the extension loads (its
        # watcher, started at load, is born there too)
        (cg / "cgroup.procs").write_text(str(pid))
        await first.run("import torch\n%load_ext jupyterlab_torchdbg")
        await first.run(TRAIN.format(steps=50) + "\ntime.sleep(1.0)\n")
        first.start_execute("kept = []\nwhile True:\n    kept.append(torch.ones(2**24))\n")
        for _ in range(100):
            await asyncio.sleep(0.2)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
        _km2, second = await start("oom.ipynb")
        await second.run("import torch\n%load_ext jupyterlab_torchdbg")
        comm = await second.open_comm()
        rec = await _wait_record(
            second,
            comm,
            lambda d: bool(d["kernels"]) and d["kernels"][0]["end"]["kind"] != "unknown",
        )
        dead = rec["kernels"][0]
        assert dead["end"]["kind"] == "oom_kill", dead
        assert dead["end"]["oom_kills"] and dead["end"]["oom_kills"] >= 1
        assert "out-of-memory killer" in dead["text"]
    finally:
        for p in (cg / "cgroup.procs").read_text().split():
            try:
                os.kill(int(p), signal.SIGKILL)
            except ProcessLookupError:
                pass
        await asyncio.sleep(0.5)
        try:
            cg.rmdir()
        except OSError:
            pass
