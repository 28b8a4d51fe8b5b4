"""Live training control in a real kernel, while the training cell runs (R12, R13, R14, R32).

The panel's comm goes over a kernel subshell (as JupyterLab >= 4.4 does with ipykernel 7),
so actions are handled while the main shell is busy training; a second subshell runs the
probes ("how many steps so far?") that a user would type in a subshell console.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
import uuid

import pytest
from kernel_client import KernelDriver

SETUP = textwrap.dedent(
    """
    import time, torch
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 8) * 10, torch.randn(64, 1) * 10
    done, records = 0, []

    def train(steps, delay=0.01):
        global done
        for _ in range(steps):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            params = [p for p in model.parameters()]
            ref = [p.grad.detach().clone() for p in params]
            pre = torch.nn.utils.get_total_norm(ref).item()
            opt.step()
            # after step() the grads are what the optimizer used
            records.append((pre, [p.grad.detach().clone() for p in params], ref))
            done += 1
            time.sleep(delay)
    """
)


async def wait_for(pred, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def probe(k: KernelDriver, expr: str, sid: str) -> str:
    """Evaluate ``expr`` on a subshell while the main shell is busy."""
    r = await k.execute(f"print({expr})", subshell_id=sid)
    assert r.ok, r.errors
    return r.stdout.strip()


async def setup(k: KernelDriver) -> tuple[str, str, str]:
    await k.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    comm_sub = await k.create_subshell()
    probe_sub = await k.create_subshell()
    comm_id = await k.open_comm(subshell_id=comm_sub)
    return comm_id, comm_sub, probe_sub


async def test_r12_clip_applies_at_next_step_while_cell_runs(kernel: KernelDriver) -> None:
    comm_id, sub, probe_sub = await setup(kernel)
    run = kernel.start_execute("train(150, 0.02)")
    await wait_for(lambda: True, 0.1)
    # wait until some unclipped steps happened, then clip from the panel
    while int(await probe(kernel, "done", probe_sub)) < 20:
        await asyncio.sleep(0.1)
    ack = await kernel.action(comm_id, "clip", {"max_norm": 1.0}, subshell_id=sub)
    assert ack["method"] == "ack" and ack["result"]["clip"] == 1.0
    clipped_from = int(await probe(kernel, "done", probe_sub))
    result = await kernel.wait_execute(run, 120)
    assert result.ok, result.errors  # the cell itself ran to the end
    await kernel.drain(0.3)
    r = await kernel.run(
        textwrap.dedent(
            """
            def check(pre, used, ref):
                # reference: clip_grad_norm_ on copies of the unclipped grads
                ps = [nn.Parameter(torch.zeros_like(g)) for g in ref]
                for p, g in zip(ps, ref):
                    p.grad = g.clone()
                torch.nn.utils.clip_grad_norm_(ps, 1.0)
                exact = all(torch.equal(u, p.grad) for u, p in zip(used, ps))
                untouched = all(torch.equal(u, g) for u, g in zip(used, ref))
                return exact, untouched, pre
            rows = [check(*rec) for rec in records]
            first = next(i for i, (e, u, pre) in enumerate(rows) if e and not u)
            print(first, all(e for e, u, pre in rows[first:]),
                  all(u for e, u, pre in rows[:first]), min(pre for e, u, pre in rows) > 1.0)
            """
        )
    )
    first, exact_after, untouched_before, needed = r.stdout.split()
    assert needed == "True"  # every step's norm was above 1.0: clipping had to act
    assert exact_after == "True" and untouched_before == "True"
    # applied at the next step boundary after the action, not at the end of the cell
    assert clipped_from - 2 <= int(first) <= clipped_from + 2
    states = [m.data for m in kernel.messages("control", comm_id)]
    assert states[-1]["clip"] == 1.0
    # unclip undoes it
    ack = await kernel.action(comm_id, "unclip", {}, subshell_id=sub)
    assert ack["result"] == {"clip": None}


async def test_pause_step_resume_while_cell_runs(kernel: KernelDriver) -> None:
    comm_id, sub, probe_sub = await setup(kernel)
    run = kernel.start_execute("train(200, 0.01)")
    while int(await probe(kernel, "done", probe_sub)) < 5:
        await asyncio.sleep(0.05)
    ack = await kernel.action(comm_id, "pause", {}, subshell_id=sub)
    assert ack["method"] == "ack"
    await kernel.pump_until(
        lambda: any(m.data["paused_at"] for m in kernel.messages("control", comm_id))
    )
    held = int(await probe(kernel, "done", probe_sub))
    paused_at = [m.data["paused_at"] for m in kernel.messages("control", comm_id)][-1]
    await kernel.drain(0.6)  # watch the stream for a while: nothing moves
    assert int(await probe(kernel, "done", probe_sub)) == held  # the loop is held...
    # ...while the cell is still running (no execute_reply yet)
    assert not any(
        m["parent_header"].get("msg_id") == run and m["msg_type"] == "execute_reply"
        for m in kernel.iopub
    )
    ack = await kernel.action(comm_id, "step", {}, subshell_id=sub)
    assert ack["method"] == "ack"
    # the single step is done when the loop is held again, one boundary later
    await kernel.pump_until(
        lambda: any(
            m.data["paused_at"] == paused_at + 1 for m in kernel.messages("control", comm_id)
        )
    )
    assert int(await probe(kernel, "done", probe_sub)) == held + 1  # exactly one step
    ack = await kernel.action(comm_id, "resume", {}, subshell_id=sub)
    assert ack["method"] == "ack"
    result = await kernel.wait_execute(run, 120)
    assert result.ok
    assert await kernel.value("done") == "200"


async def test_r12_save_checkpoint_while_paused_is_served_at_the_pause(
    kernel: KernelDriver,
) -> None:
    """A loop held paused sits at a step boundary, a safe point: Save checkpoint is served
    there at once, with the weights as they are while paused. Before, it waited for the
    next optimizer step (none comes while paused), blocked the panel's channel for 60 s
    and was refused with "the running cell reached no optimizer step in 60 s"."""
    comm_id, sub, probe_sub = await setup(kernel)
    run = kernel.start_execute("train(200, 0.01)")
    while int(await probe(kernel, "done", probe_sub)) < 5:
        await asyncio.sleep(0.05)
    await kernel.action(comm_id, "pause", {}, subshell_id=sub)
    await kernel.pump_until(
        lambda: any(m.data["paused_at"] for m in kernel.messages("control", comm_id))
    )
    held = int(await probe(kernel, "done", probe_sub))
    t0 = time.monotonic()
    name = f"paused-{uuid.uuid4().hex[:8]}.pt"  # the kernel's directory is the repo's
    reply = await kernel.action(
        comm_id, "save_checkpoint", {"filename": name}, subshell_id=sub, timeout=20
    )
    assert reply["method"] == "ack", reply
    assert time.monotonic() - t0 < 5  # served at the pause, not after a timeout
    assert int(await probe(kernel, "done", probe_sub)) == held  # still held: no step ran
    same = await probe(
        kernel,
        "all(torch.equal(a, b) for a, b in zip("
        f"torch.load({name!r}, weights_only=True)['models']['model'].values(), "
        "model.state_dict().values()))",
        probe_sub,
    )
    await probe(kernel, f"__import__('os').remove({name!r})", probe_sub)
    assert same == "True"  # the weights the paused loop holds
    await kernel.action(comm_id, "resume", {}, subshell_id=sub)
    result = await kernel.wait_execute(run, 120)
    assert result.ok, result.errors
    assert await kernel.value("done") == "200"


async def test_interrupt_while_paused_ends_the_cell_cleanly(
    kernel: KernelDriver, jp_asyncio_loop: object
) -> None:
    comm_id, sub, probe_sub = await setup(kernel)
    run = kernel.start_execute("train(500, 0.01)")
    while int(await probe(kernel, "done", probe_sub)) < 3:
        await asyncio.sleep(0.05)
    await kernel.action(comm_id, "pause", {}, subshell_id=sub)
    await kernel.pump_until(
        lambda: any(m.data["paused_at"] for m in kernel.messages("control", comm_id))
    )
    msg = kernel.kc.session.msg("interrupt_request", {})
    kernel.kc.control_channel.send(msg)
    result = await kernel.wait_execute(run, 60)
    assert not result.ok
    assert result.reply["content"]["ename"] == "KeyboardInterrupt"
    # the kernel is usable, the pause is over, and the next run is not held
    assert kernel.messages("control", comm_id)[-1].data["paused"] is False
    await kernel.run("train(3, 0)")
    assert int(await kernel.value("done")) >= 6


async def test_r12_without_subshell_action_waits_for_the_cell(kernel: KernelDriver) -> None:
    await kernel.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    comm_id = await kernel.open_comm()  # over the main shell, like a client without subshells
    run = kernel.start_execute("train(60, 0.02)")
    await asyncio.sleep(0.3)
    t0 = time.monotonic()
    ack = await kernel.action(comm_id, "clip", {"max_norm": 1.0})  # pending until the cell ends
    result = await kernel.wait_execute(run, 60)
    assert result.ok
    assert ack["method"] == "ack"
    # the reply came only after the cell finished (about 60 * 0.02 s)
    assert time.monotonic() - t0 > 0.6
    # and pause is refused over the main shell: nothing could deliver Resume
    err = await kernel.action(comm_id, "pause", {})
    assert err["method"] == "error" and err["code"] == "refused"
    assert "subshell" in err["message"]


async def test_r32_clip_refused_when_gradients_are_non_finite(kernel: KernelDriver) -> None:
    comm_id, sub, _ = await setup(kernel)
    await kernel.action(comm_id, "clip", {"max_norm": 1.0}, subshell_id=sub)
    await kernel.run(
        textwrap.dedent(
            """
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            model[0].weight.grad[0, 0] = float('nan')
            before = [p.grad.clone() for p in model.parameters()]
            opt.step()
            same = all(torch.equal(a.nan_to_num(), p.grad.nan_to_num())
                       for a, p in zip(before, model.parameters()))
            print(same)
            """
        )
    )
    await kernel.drain(0.3)
    assert await kernel.value("same") == "True"
    refusal = kernel.messages("control", comm_id)[-1].data["last_refusal"]
    assert refusal and "not clipped" in refusal and "nan" in refusal


@pytest.mark.filterwarnings("ignore:Message serialization failed")  # 1e309 sent on purpose
async def test_r14_control_arguments_validated(kernel: KernelDriver) -> None:
    comm_id, sub, _ = await setup(kernel)
    for args in (
        {"max_norm": -1},
        {"max_norm": 0},
        {"max_norm": "1.0"},
        {"max_norm": 1e309},
        {},
        {"max_norm": 1.0, "norm_type": 3},
    ):
        reply = await kernel.action(comm_id, "clip", args, subshell_id=sub)
        assert reply["method"] == "error" and reply["code"] == "invalid_args", (args, reply)
    reply = await kernel.action(comm_id, "scale_lr", {"factor": 0}, subshell_id=sub)
    assert reply["code"] == "invalid_args"
    reply = await kernel.action(comm_id, "step", {}, subshell_id=sub)
    assert reply["code"] == "refused"  # not paused


async def test_scale_lr_and_reset_at_next_step(kernel: KernelDriver) -> None:
    comm_id, sub, probe_sub = await setup(kernel)
    # idle (nothing trains): refused, and the idle optimizer is left alone
    reply = await kernel.action(comm_id, "scale_lr", {"factor": 0.5}, subshell_id=sub)
    assert reply["code"] == "refused" and "nothing is training" in reply["message"]
    run = kernel.start_execute("train(300, 0.01)")
    while int(await probe(kernel, "done", probe_sub)) < 3:
        await asyncio.sleep(0.05)
    ack = await kernel.action(comm_id, "scale_lr", {"factor": 0.5}, subshell_id=sub)
    assert ack["method"] == "ack", ack
    await kernel.pump_until(lambda: kernel.messages("control", comm_id)[-1].data["lr_scale"] == 0.5)
    assert await probe(kernel, "opt.param_groups[0]['lr']", probe_sub) == "0.0005"
    await kernel.action(comm_id, "reset_lr", {}, subshell_id=sub)
    await kernel.pump_until(
        lambda: kernel.messages("control", comm_id)[-1].data["lr_scale"] is None
    )
    assert await probe(kernel, "opt.param_groups[0]['lr']", probe_sub) == "0.001"
    reply = await kernel.action(comm_id, "reset_lr", {}, subshell_id=sub)
    assert reply["code"] == "refused"  # nothing changed any more
    await kernel.action(comm_id, "resume", {}, subshell_id=sub)
    assert (await kernel.wait_execute(run, 60)).ok


async def test_resume_reaches_a_loop_paused_by_the_training_thread(kernel: KernelDriver) -> None:
    """The pause broadcast comes from the training thread (main shell); ipykernel would then
    route the panel's next comm message to the busy main shell. Resume must still arrive."""
    comm_id, sub, probe_sub = await setup(kernel)
    reply = await kernel.action(comm_id, "pause", {}, subshell_id=sub)
    assert reply["code"] == "refused" and reply["message"] == "pause: Idle: nothing is training"
    run = kernel.start_execute("train(500, 0.01)")
    while int(await probe(kernel, "done", probe_sub)) < 3:
        await asyncio.sleep(0.05)
    await kernel.action(comm_id, "pause", {}, subshell_id=sub)
    await kernel.pump_until(
        lambda: any(m.data["paused_at"] for m in kernel.messages("control", comm_id))
    )
    held = next(
        m.data["paused_at"] for m in kernel.messages("control", comm_id) if m.data["paused_at"]
    )
    assert held < 100  # the step within this run
    await kernel.drain(0.3)
    await kernel.action(comm_id, "step", {}, subshell_id=sub, timeout=10)
    await kernel.pump_until(
        lambda: any(m.data["paused_at"] == held + 1 for m in kernel.messages("control", comm_id)),
        timeout=10,
    )
    await kernel.action(comm_id, "resume", {}, subshell_id=sub, timeout=10)
    result = await kernel.wait_execute(run, 30)
    assert result.ok
