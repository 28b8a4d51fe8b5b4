"""The first action of a kernel's first run applies live (issue #14).

JupyterLab opens the tool's comm before its per-target subshell exists, so the
``comm_open`` goes over the main shell; the actions that follow go over the subshell.
ipykernel >= 7 routes a comm's incoming messages to the subshell that last *published*
on it: the hello and snapshot were published in reply to the open (main shell), so the
first action sent while a cell trains was routed to the busy main shell and waited for
the cell to end. Later actions were live, because the first reply, once sent, moved the
route to the subshell. This test opens the comm as JupyterLab does and fails without the
fix in ``kernel/subshell_routes.py``.
"""

from __future__ import annotations

import asyncio
import textwrap
import time

from kernel_client import KernelDriver

SETUP = textwrap.dedent(
    """
    import time, torch
    from torch import nn
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    done = 0
    def train(steps, delay):
        global done
        for _ in range(steps):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
            done += 1
            time.sleep(delay)
    """
)


async def test_first_action_over_a_subshell_is_live_when_the_comm_opened_on_the_main_shell(
    kernel: KernelDriver,
) -> None:
    await kernel.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    comm_id = await kernel.open_comm()  # the open goes over the main shell (JupyterLab)
    sub = await kernel.create_subshell()  # the per-target subshell, created afterwards
    probe = await kernel.create_subshell()
    run = kernel.start_execute("train(400, 0.01)")  # about 4 s
    while True:
        r = await kernel.execute("print(done)", subshell_id=probe)
        if int(r.stdout.strip() or 0) >= 5:
            break
        await asyncio.sleep(0.05)
    t0 = time.monotonic()
    ack = await kernel.action(comm_id, "clip", {"max_norm": 1.0}, subshell_id=sub, timeout=60)
    took = time.monotonic() - t0
    assert ack["method"] == "ack"
    assert took < 2.0, f"the first action waited {took:.1f} s (for the cell's end)"
    r = await kernel.execute("print(done)", subshell_id=probe)
    assert int(r.stdout.strip()) < 400  # applied while the loop still runs
    result = await kernel.wait_execute(run, 60)
    assert result.ok
