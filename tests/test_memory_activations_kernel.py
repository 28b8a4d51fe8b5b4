"""Where activation memory goes, in a real ipykernel: ``measure_activations`` sent on a
subshell while a cell trains is acknowledged ``armed`` at once, the next training step is
measured on the training thread, and a ``memory`` status with ``activations`` done follows
while the cell still runs; no hook of the measurement is left on the model after (R41)."""

from __future__ import annotations

import asyncio
import textwrap
import time

from kernel_client import KernelDriver

SETUP = textwrap.dedent(
    """
    import time, torch
    from torch import nn
    model = nn.Sequential(nn.Linear(8, 512), nn.ReLU(), nn.Linear(512, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done = 0

    def train(steps, delay=0.01):
        global done
        for _ in range(steps):
            opt.zero_grad()
            model(torch.randn(32, 8)).pow(2).mean().backward()
            opt.step()
            done += 1
            time.sleep(delay)

    def hooks_left():
        from jupyterlab_torchdbg.kernel.module_hooks import MODULE_HOOKS
        MODULE_HOOKS.wait_idle(5)
        return sum(h.owner._site == "memory:activations" for h in MODULE_HOOKS.installed())
    """
)


async def test_measure_activations_while_a_cell_trains(kernel: KernelDriver) -> None:
    await kernel.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    comm_sub = await kernel.create_subshell()
    probe_sub = await kernel.create_subshell()
    comm_id = await kernel.open_comm(subshell_id=comm_sub)
    run = kernel.start_execute("train(600, 0.01)")
    deadline = time.monotonic() + 60
    while True:
        r = await kernel.execute("print(done)", subshell_id=probe_sub)
        if int(r.stdout.strip() or 0) >= 10:
            break
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    n0 = len(kernel.comm)
    ack = await kernel.action(comm_id, "measure_activations", subshell_id=comm_sub)
    assert ack["method"] == "ack" and ack["result"] == {"state": "armed"}, ack

    def measured() -> bool:
        return any(
            m.method == "memory" and (m.data.get("activations") or {}).get("state") == "done"
            for m in kernel.comm[n0:]
        )

    await kernel.pump_until(measured, 30)
    r = await kernel.execute("print(done)", subshell_id=probe_sub)
    assert int(r.stdout.strip()) < 600  # reported while the cell still trains
    act = next(
        m.data["activations"]
        for m in kernel.comm[n0:]
        if m.method == "memory" and (m.data.get("activations") or {}).get("state") == "done"
    )
    assert act["batch"] == 32 and act["device"] == "cpu"
    assert act["modules"][0]["name"] == "model.1"  # the ReLU's 512-wide output
    assert act["total"] == 32 * 8 * 4 + 32 * 512 * 4
    assert act["per_sample"] == 8 * 4 + 512 * 4
    assert act["limit_source"] in ("cgroup", "host") and act["fits"] >= 32
    assert act["run"] is not None and "batch 32 saves" in act["text"]
    result = await kernel.wait_execute(run, 120)
    assert result.ok, result.errors
    assert (await kernel.run("print(hooks_left())")).stdout.strip() == "0"
