"""Learning-rate controls that do exactly what they say, in a real kernel (issue #14).

The sequence from the issue: LR x0.5 during a run, Reset LR while idle, re-run with a
cell that sets lr=0.5, LR x0.5: the optimizer's lr must be 0.25 and the ``control``
message must say so. Before, the reset was applied to the idle optimizer at the re-run's
first step (and the chip showed a cumulative factor unrelated to the real lr); now (issue
#22) a Reset while idle applies at once. Also: absolute ``set_lr`` keeps the ratio between
param groups, ``reset_lr`` restores the values from before the panel's first change, also
after the run and in the next run of the same optimizer, and the other LR actions are
refused while idle with the reason.
"""

from __future__ import annotations

import asyncio
import textwrap
from typing import Any

from kernel_client import KernelDriver

SETUP = textwrap.dedent(
    """
    import time, torch
    from torch import nn
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(
        [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.1}],
        lr=1.0,
    )
    done, stop = 0, False
    def train(steps, delay=0.01):
        global done, stop
        done, stop = 0, False
        for _ in range(steps):
            if stop:
                break
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
            done += 1
            time.sleep(delay)
    """
)


def control(k: KernelDriver, comm_id: str) -> dict[str, Any]:
    return k.messages("control", comm_id)[-1].data


def lrs(k: KernelDriver, comm_id: str) -> list[Any]:
    msg = control(k, comm_id)
    target = next(t for t in msg["targets"] if t["key"] == msg["target"])
    return [g["lr"] for g in target["groups"]]


async def until_steps(k: KernelDriver, probe: str, n: int) -> None:
    while True:
        r = await k.execute("print(done)", subshell_id=probe)
        if int(r.stdout.strip() or 0) >= n:
            return
        await asyncio.sleep(0.05)


async def value(k: KernelDriver, expr: str, probe: str) -> str:
    r = await k.execute(f"print({expr})", subshell_id=probe)
    assert r.ok, r.errors
    return r.stdout.strip()


async def test_lr_sequence_from_the_issue(kernel: KernelDriver) -> None:
    await kernel.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    sub = await kernel.create_subshell()
    probe = await kernel.create_subshell()
    comm_id = await kernel.open_comm(subshell_id=sub)
    await kernel.pump_until(lambda: bool(kernel.messages("control", comm_id)))
    idle = control(kernel, comm_id)
    assert idle["idle"] is True and idle["targets"] == []
    for action, args in (("pause", {}), ("set_lr", {"lr": 0.1}), ("scale_lr", {"factor": 0.5})):
        reply = await kernel.action(comm_id, action, args, subshell_id=sub)
        assert reply["code"] == "refused", (action, reply)

    # run 1: LR x0.5 while it trains
    run = kernel.start_execute("for g in opt.param_groups[:1]: g['lr'] = 1.0\ntrain(300)")
    await until_steps(kernel, probe, 3)
    ack = await kernel.action(comm_id, "scale_lr", {"factor": 0.5}, subshell_id=sub)
    assert ack["method"] == "ack", ack
    await kernel.pump_until(lambda: lrs(kernel, comm_id) == [0.5, 0.05])
    msg = control(kernel, comm_id)
    assert msg["idle"] is False and msg["lr_scale"] == 0.5 and msg["run"] == 1
    assert [g["initial_lr"] for g in msg["targets"][0]["groups"]] == [1.0, 0.1]
    assert (await kernel.wait_execute(run, 60)).ok
    await kernel.pump_until(lambda: control(kernel, comm_id)["idle"] is True)

    # Reset LR while idle (issue #22): applied at once, nothing waits for a next run
    reply = await kernel.action(comm_id, "reset_lr", {}, subshell_id=sub)
    assert reply["method"] == "ack" and reply["result"]["applies"].startswith("now"), reply
    await kernel.pump_until(lambda: lrs(kernel, comm_id) == [1.0, 0.1])
    await kernel.run("train(0)")  # a cell that does not train
    assert await kernel.value("[g['lr'] for g in opt.param_groups]") == "[1.0, 0.1]"

    # run 2: the cell sets lr=0.5, then LR x0.5 -> 0.25, and the message says so
    run = kernel.start_execute("for g in opt.param_groups[:1]: g['lr'] = 0.5\ntrain(3000)")
    await until_steps(kernel, probe, 3)
    msg = control(kernel, comm_id)
    assert msg["run"] == 2 and msg["step"] < 50 and msg["lr_scale"] is None
    ack = await kernel.action(comm_id, "scale_lr", {"factor": 0.5}, subshell_id=sub)
    assert ack["method"] == "ack", ack
    await kernel.pump_until(lambda: lrs(kernel, comm_id)[0] == 0.25)
    assert await value(kernel, "opt.param_groups[0]['lr']", probe) == "0.25"
    msg = control(kernel, comm_id)
    assert msg["lr_scale"] == 0.5
    assert msg["targets"][0]["groups"][0]["initial_lr"] == 0.5

    # absolute: set_lr for all groups keeps their ratio; for one group, only that one
    key = msg["target"]
    ack = await kernel.action(comm_id, "set_lr", {"lr": 0.1, "optimizer": key}, subshell_id=sub)
    assert ack["method"] == "ack", ack
    await kernel.pump_until(lambda: lrs(kernel, comm_id)[0] == 0.1)
    assert lrs(kernel, comm_id)[1] == 0.1 * 0.05 / 0.25
    await kernel.action(comm_id, "set_lr", {"lr": 0.3, "group": 1}, subshell_id=sub)
    await kernel.pump_until(lambda: lrs(kernel, comm_id)[1] == 0.3)
    bad = await kernel.action(comm_id, "set_lr", {"lr": 0.3, "group": 5}, subshell_id=sub)
    assert bad["code"] == "refused", bad  # valid, but no such group / target now
    bad = await kernel.action(comm_id, "set_lr", {"lr": 0.1, "optimizer": "x#9"}, subshell_id=sub)
    assert bad["code"] == "refused", bad  # valid, but no such group / target now
    # Reset: the values from before the first change in this run (what the cell set)
    await kernel.action(comm_id, "reset_lr", {"optimizer": key}, subshell_id=sub)
    await kernel.pump_until(lambda: lrs(kernel, comm_id) == [0.5, 0.1])
    assert await value(kernel, "[g['lr'] for g in opt.param_groups]", probe) == "[0.5, 0.1]"
    assert control(kernel, comm_id)["lr_scale"] is None
    await kernel.execute("stop = True", subshell_id=probe)
    assert (await kernel.wait_execute(run, 60)).ok


async def test_pending_changes_are_dropped_when_the_run_ends(kernel: KernelDriver) -> None:
    """A change acked while the loop runs, not applied before the cell ends, never
    reaches the optimizer when it is idle (nor at the next run)."""
    await kernel.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    sub = await kernel.create_subshell()
    probe = await kernel.create_subshell()
    comm_id = await kernel.open_comm(subshell_id=sub)
    # one step, then a long wait without steps inside the same cell
    run = kernel.start_execute("train(2, 0)\ntime.sleep(2.0)")
    await until_steps(kernel, probe, 2)
    ack = await kernel.action(comm_id, "scale_lr", {"factor": 0.5}, subshell_id=sub)
    assert ack["method"] == "ack" and ack["result"]["pending"] is True
    assert (await kernel.wait_execute(run, 60)).ok
    await kernel.run("train(3, 0)")  # the next run
    assert await kernel.value("opt.param_groups[0]['lr']") == "1.0"


async def _halve_in_a_run(k: KernelDriver, comm_id: str, sub: str, probe: str) -> None:
    """One run of ``train`` in which the panel halves the LR; returns once it is idle."""
    run = k.start_execute("train(100000)")
    await until_steps(k, probe, 3)
    before = lrs(k, comm_id)
    ack = await k.action(comm_id, "scale_lr", {"factor": 0.5}, subshell_id=sub)
    assert ack["method"] == "ack", ack
    await k.pump_until(lambda: lrs(k, comm_id) == [v / 2 for v in before])
    await k.execute("stop = True", subshell_id=probe)
    assert (await k.wait_execute(run, 60)).ok
    await k.pump_until(lambda: control(k, comm_id)["idle"] is True)


async def test_reset_lr_after_the_run_and_in_the_next_run(kernel: KernelDriver) -> None:
    """Issue #22: LR x0.5 in a run, the run ends: Reset restores the optimizer's lr at
    once; halved again, the next run of the same optimizer (its lr untouched by the cell)
    still offers Reset back to the original; a group the user's code set in between is
    the user's value and is left alone."""
    await kernel.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    sub = await kernel.create_subshell()
    probe = await kernel.create_subshell()
    comm_id = await kernel.open_comm(subshell_id=sub)
    await kernel.pump_until(lambda: bool(kernel.messages("control", comm_id)))

    # after the run
    await _halve_in_a_run(kernel, comm_id, sub, probe)
    idle = control(kernel, comm_id)
    groups = idle["targets"][0]["groups"]
    assert [g["changed"] for g in groups] == [True, True], idle
    assert [g["initial_lr"] for g in groups] == [1.0, 0.1]
    ack = await kernel.action(comm_id, "reset_lr", {}, subshell_id=sub)
    assert ack["method"] == "ack" and ack["result"]["applies"].startswith("now"), ack
    await kernel.pump_until(lambda: lrs(kernel, comm_id) == [1.0, 0.1])
    assert await kernel.value("[g['lr'] for g in opt.param_groups]") == "[1.0, 0.1]"
    again = await kernel.action(comm_id, "reset_lr", {}, subshell_id=sub)
    assert again["code"] == "refused", again  # nothing left to reset
    # the other LR actions still refuse an idle optimizer
    halve = await kernel.action(comm_id, "scale_lr", {"factor": 0.5}, subshell_id=sub)
    assert halve["code"] == "refused", halve

    # in the next run of the same optimizer
    await _halve_in_a_run(kernel, comm_id, sub, probe)
    run = kernel.start_execute("train(100000)")
    await until_steps(kernel, probe, 3)
    await kernel.pump_until(lambda: control(kernel, comm_id)["run"] == 3)
    msg = control(kernel, comm_id)
    groups = msg["targets"][0]["groups"]
    assert [g["changed"] for g in groups] == [True, True], msg
    assert [g["initial_lr"] for g in groups] == [1.0, 0.1]
    ack = await kernel.action(comm_id, "reset_lr", {}, subshell_id=sub)
    assert ack["method"] == "ack" and ack["result"]["applies"].startswith("at the next"), ack
    await kernel.pump_until(lambda: lrs(kernel, comm_id) == [1.0, 0.1])
    assert await value(kernel, "[g['lr'] for g in opt.param_groups]", probe) == "[1.0, 0.1]"
    await kernel.execute("stop = True", subshell_id=probe)
    assert (await kernel.wait_execute(run, 60)).ok
    await kernel.pump_until(lambda: control(kernel, comm_id)["idle"] is True)

    # a group set by the user's code between the runs is not the panel's to reset
    await _halve_in_a_run(kernel, comm_id, sub, probe)
    await kernel.run("opt.param_groups[0]['lr'] = 0.3")
    run = kernel.start_execute("train(100000)")
    await until_steps(kernel, probe, 3)
    await kernel.pump_until(lambda: control(kernel, comm_id)["run"] == 5)
    groups = control(kernel, comm_id)["targets"][0]["groups"]
    assert [g["changed"] for g in groups] == [False, True], groups
    ack = await kernel.action(comm_id, "reset_lr", {}, subshell_id=sub)
    assert ack["method"] == "ack", ack
    await kernel.pump_until(lambda: lrs(kernel, comm_id) == [0.3, 0.1])
    await kernel.execute("stop = True", subshell_id=probe)
    assert (await kernel.wait_execute(run, 60)).ok
