"""JupyterLab's kernel status stays "busy" while a training cell runs, whatever the panel does.

JupyterLab (``@jupyterlab/services`` ``KernelConnection``) sets the kernel's status from
*every* iopub ``status`` message, whichever request it answers (only the parent types in
the server's ``untracked_message_types`` are skipped, and ``comm_msg`` is not one). With
ipykernel >= 7 a panel action is a ``comm_msg`` handled on a kernel subshell, which
publishes ``busy`` then ``idle`` for it: the notebook then showed the kernel "Idle" while
its cell still trained (also while paused). The kernel side re-asserts the main shell's
``busy`` right after the subshell's ``idle`` (kernel/shell_status.py). These tests read
the iopub stream as JupyterLab does: the kernel's status is the last ``status`` message.
"""

from __future__ import annotations

import textwrap
from typing import Any

from kernel_client import KernelDriver

SETUP = textwrap.dedent(
    """
    import time, torch
    from torch import nn
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 8), torch.randn(32, 1)

    def train(steps, delay=0.01):
        for _ in range(steps):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            time.sleep(delay)
    """
)


def lab_status(iopub: list[dict[str, Any]]) -> str | None:
    """The kernel status JupyterLab would show after these iopub messages."""
    states = [m["content"]["execution_state"] for m in iopub if m["msg_type"] == "status"]
    return states[-1] if states else None


def statuses_for(iopub: list[dict[str, Any]], msg_id: str) -> list[str]:
    return [
        m["content"]["execution_state"]
        for m in iopub
        if m["msg_type"] == "status" and m["parent_header"].get("msg_id") == msg_id
    ]


async def test_kernel_stays_busy_after_panel_actions_while_a_cell_trains_and_pauses(
    loaded: KernelDriver,
) -> None:
    k = loaded
    await k.run(SETUP)
    comm_id = await k.open_comm()  # JupyterLab opens the comm on the main shell...
    sub = await k.create_subshell()  # ...and sends the actions over its subshell
    n = len(k.iopub)
    c0 = len(k.comm)
    run = k.start_execute("train(100000, 0.01)")
    # the loop is stepping once the stream carries gradient rows
    await k.pump_until(lambda: any(m.method == "series" for m in k.comm[c0:]), 60)
    assert lab_status(k.iopub[n:]) == "busy"

    ack = await k.action(comm_id, "pause", {}, subshell_id=sub)
    assert ack["method"] == "ack", ack
    await k.pump_until(
        lambda: any(m.data.get("paused_at") for m in k.messages("control", comm_id)), 30
    )
    # the subshell answered (busy, idle for the comm_msg)...
    await k.pump_until(lambda: statuses_for(k.iopub, ack_parent(k, comm_id)) == ["busy", "idle"])
    # ...and the kernel still shows busy: the paused cell has not ended
    await k.pump_until(lambda: lab_status(k.iopub[n:]) == "busy", 5)
    await k.drain(0.3)
    assert lab_status(k.iopub[n:]) == "busy"
    reasserted = [
        m
        for m in k.iopub[n:]
        if m["msg_type"] == "status" and m["parent_header"].get("msg_id") == run
    ]
    assert [m["content"]["execution_state"] for m in reasserted] == ["busy", "busy"]

    ack = await k.action(comm_id, "resume", {}, subshell_id=sub)
    assert ack["method"] == "ack", ack
    await k.drain(0.3)
    assert lab_status(k.iopub[n:]) == "busy"

    # the cell ends: idle, and nothing re-asserts busy after it
    interrupt = k.kc.session.msg("interrupt_request", {})
    k.kc.control_channel.send(interrupt)
    await k.wait_execute(run, 60)
    await k.drain(0.5)
    assert lab_status(k.iopub[n:]) == "idle"
    assert statuses_for(k.iopub, run)[-1] == "idle"


async def test_an_action_while_no_cell_runs_leaves_the_kernel_idle(loaded: KernelDriver) -> None:
    k = loaded
    await k.run(SETUP + "\ntrain(3)")
    comm_id = await k.open_comm()
    sub = await k.create_subshell()
    n = len(k.iopub)
    ack = await k.action(comm_id, "snapshot", {}, subshell_id=sub)
    assert ack["method"] == "ack"
    await k.drain(0.5)
    assert lab_status(k.iopub[n:]) == "idle"
    # nothing was re-asserted for the cells that ended before
    assert not [
        m
        for m in k.iopub[n:]
        if m["msg_type"] == "status" and m["parent_header"].get("msg_type") == "execute_request"
    ]


def ack_parent(k: KernelDriver, comm_id: str) -> str:
    """The msg_id of the last comm_msg request we sent (the parent of its statuses)."""
    ids = [
        m["parent_header"].get("msg_id")
        for m in k.iopub
        if m["msg_type"] == "status" and m["parent_header"].get("msg_type") == "comm_msg"
    ]
    return str(ids[-1]) if ids else ""
