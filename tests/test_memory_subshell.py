"""The memory panel while a training cell runs, with the comm on a kernel subshell (as
JupyterLab >= 4.4 does with ipykernel 7): the timeline and the cards keep coming, and
``save_checkpoint`` is applied at the next optimizer step, on the training thread, and
acknowledged while the cell still runs (R12, R13)."""

from __future__ import annotations

import asyncio
import textwrap
import time
import uuid
from pathlib import Path

from kernel_client import KernelDriver

SETUP = textwrap.dedent(
    """
    import time, threading, torch
    from torch import nn
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters())
    done, saved_on = 0, []
    _save = torch.save
    def spy(*a, **k):  # which thread writes the checkpoint
        saved_on.append(threading.current_thread() is threading.main_thread())
        return _save(*a, **k)
    torch.save = spy

    def train(steps, delay=0.01):
        global done
        for _ in range(steps):
            opt.zero_grad()
            model(torch.randn(16, 8)).pow(2).mean().backward()
            opt.step()
            done += 1
            time.sleep(delay)
    """
)


async def probe(k: KernelDriver, expr: str, sid: str) -> str:
    r = await k.execute(f"print({expr})", subshell_id=sid)
    assert r.ok, r.errors
    return r.stdout.strip()


async def test_r12_save_checkpoint_and_live_memory_while_a_cell_trains(
    kernel: KernelDriver,
) -> None:
    await kernel.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    cwd = Path((await kernel.run("import os; print(os.getcwd())")).stdout.strip())
    name = f"torchdbg_test_{uuid.uuid4().hex[:8]}.pt"
    try:
        await _save_while_training(kernel, name)
    finally:
        (cwd / name).unlink(missing_ok=True)  # the kernel writes in its working directory


async def _save_while_training(kernel: KernelDriver, name: str) -> None:
    comm_sub = await kernel.create_subshell()
    probe_sub = await kernel.create_subshell()
    comm_id = await kernel.open_comm(subshell_id=comm_sub)
    n0 = len(kernel.comm)
    run = kernel.start_execute("train(400, 0.01)")
    deadline = time.monotonic() + 60
    while int(await probe(kernel, "done", probe_sub)) < 20:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    ack = await kernel.action(comm_id, "save_checkpoint", {"filename": name}, subshell_id=comm_sub)
    assert ack["method"] == "ack", ack
    assert ack["result"]["file"] == name and ack["result"]["models"] == ["model"]
    at_ack = int(await probe(kernel, "done", probe_sub))
    assert at_ack < 400  # acknowledged while the cell still runs
    refused = await kernel.action(comm_id, "empty_cache", subshell_id=comm_sub)
    assert refused["method"] == "error" and refused["code"] == "refused"
    during = [m for m in kernel.comm[n0:] if m.method == "memory"]
    result = await kernel.wait_execute(run, 120)
    assert result.ok, result.errors
    assert await probe(kernel, "saved_on", probe_sub) == "[True]"  # the training thread
    assert len(during) >= 1  # the cards kept coming while the main shell was busy
    await kernel.drain(0.5)
    names = {
        n
        for m in kernel.comm[n0:]
        if m.method == "series"
        for block_names in m.names or []
        for n in block_names or []
    }
    assert "mem/cpu/rss" in names
    r = await kernel.run(
        f"import os\nsd = torch.load({name!r}, weights_only=True)\nprint(sorted(sd))"
    )
    assert r.stdout.strip() == "['models', 'optimizers', 'saved_by', 'time']"
