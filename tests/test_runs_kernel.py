"""Runs kept apart, in a real kernel (issue #14; PROTOCOL.md "Runs").

A re-run cell is a new run with its own step numbering, its own blocks (new ids, the
``run`` field, x from 1) and its own alarms; two optimizers stepping in one cell (a GAN)
are one run; a logged step going backwards starts a run; a panel that connects later gets
``runs`` right after its snapshot, and the earlier run's blocks in the snapshot. Every
message is validated against the schema as it arrives (kernel_client).
"""

from __future__ import annotations

import textwrap
from typing import Any

from kernel_client import KernelDriver, decode_blocks

SETUP = textwrap.dedent(
    """
    import torch
    from torch import nn
    from jupyterlab_torchdbg import log
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    def train(steps, nan_at=None):
        for i in range(steps):
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            if i + 1 == nan_at:
                model[0].weight.grad[0, 0] = float("nan")
            opt.step()
            log(loss=loss.item())
    """
)


def series_blocks(k: KernelDriver, comm_id: str) -> list[tuple[dict[str, Any], list[str]]]:
    """Every block of every ``series`` message with its names (the panel's table)."""
    out = []
    for m in k.messages("series", comm_id):
        assert m.names is not None
        for b, names in zip(m.data["blocks"], m.names, strict=True):
            assert names is not None
            out.append((b, names))
    return out


async def test_rerun_cell_is_a_new_run_with_its_own_steps_blocks_and_alerts(
    kernel: KernelDriver,
) -> None:
    await kernel.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    sub = await kernel.create_subshell()
    comm_id = await kernel.open_comm(subshell_id=sub)
    await kernel.run("train(6, nan_at=3)")
    # the NaN reached the weights: fresh ones, so the re-run trains cleanly
    await kernel.run("model[0].reset_parameters(); model[2].reset_parameters()")
    await kernel.run("train(4)")
    await kernel.drain(0.5)
    runs = kernel.messages("runs", comm_id)[-1].data
    assert runs["current"] is None  # both cells ended
    r1, r2 = runs["runs"]
    assert (r1["id"], r1["reason"], r1["steps"]) == (1, "first", 6)
    assert (r2["id"], r2["reason"], r2["steps"]) == (2, "idle", 4)
    assert r1["optimizers"] == r2["optimizers"] == ["opt"]
    assert r2["execution_count"] > r1["execution_count"]
    assert r1["end"] is not None and r1["end"] <= r2["start"]
    assert r1["alerts"] >= 1 and r2["alerts"] == 0
    # blocks: the same names under new ids, each with its run; x restarts at 1
    by_run: dict[tuple[str, int], set[int]] = {}
    for b, names in series_blocks(kernel, comm_id):
        if names[0] in ("loss", "grad/opt/total"):
            by_run.setdefault((names[0], b["run"]), set()).add(b["id"])
    assert set(by_run) == {("loss", 1), ("loss", 2), ("grad/opt/total", 1), ("grad/opt/total", 2)}
    assert by_run[("loss", 1)].isdisjoint(by_run[("loss", 2)])
    assert by_run[("grad/opt/total", 1)].isdisjoint(by_run[("grad/opt/total", 2)])
    # alarms: run 1's at its step 3; run 2 counted afresh, the total kept
    alerts = [a for m in kernel.messages("alert", comm_id) for a in m.data["alerts"]]
    assert alerts and all(a["run"] == 1 for a in alerts)
    assert any(a["kind"].startswith("non_finite") and a["step"] == 3 for a in alerts)
    grads = kernel.messages("grads", comm_id)[-1].data
    assert grads["alerts"] == 0 and grads["alerts_total"] == len(alerts) > 0
    assert [(t["name"], t["run"], t["step"]) for t in grads["tracks"]] == [("opt", 2, 4)]

    # a panel that connects now: runs right after the snapshot, both runs' blocks in it
    late = await kernel.open_comm(subshell_id=sub)
    await kernel.pump_until(lambda: bool(kernel.messages("runs", late)))
    order = [m.method for m in kernel.comm if m.comm_id == late]
    assert order[:3] == ["hello", "snapshot", "runs"]
    snap = kernel.messages("snapshot", late)[0]
    runs_of = {}
    for b in snap.data["blocks"]:
        if b["names"][0] in ("loss", "grad/opt/total"):
            runs_of.setdefault(b["names"][0], []).append(b["run"])
    assert sorted(runs_of["loss"]) == [1, 2] and sorted(runs_of["grad/opt/total"]) == [1, 2]
    decoded = decode_blocks(snap)  # a name's blocks joined, oldest run first
    x, _ = decoded["loss"]
    assert list(x) == [1, 2, 3, 4, 5, 6, 1, 2, 3, 4]  # log() counts calls per run from 1
    x, _ = decoded["grad/opt/total"]
    assert list(x) == [1, 2, 3, 4, 5, 6, 1, 2, 3, 4]  # the track's step restarts at 1


async def test_gan_is_one_run_and_a_logged_step_going_back_starts_one(
    kernel: KernelDriver,
) -> None:
    await kernel.run(
        "%load_ext jupyterlab_torchdbg\n"
        + textwrap.dedent(
            """
            import torch
            from torch import nn
            from jupyterlab_torchdbg import log
            D, G = nn.Linear(4, 1), nn.Linear(2, 4)
            d_opt = torch.optim.Adam(D.parameters(), 1e-3)
            g_opt = torch.optim.Adam(G.parameters(), 1e-3)
            """
        )
    )
    sub = await kernel.create_subshell()
    comm_id = await kernel.open_comm(subshell_id=sub)
    await kernel.run(
        textwrap.dedent(
            """
            for step in range(5):
                d_opt.zero_grad()
                D(G(torch.randn(8, 2)).detach()).mean().backward()
                d_opt.step()
                g_opt.zero_grad()
                (-D(G(torch.randn(8, 2)))).mean().backward()
                g_opt.step()
                log(step, d_loss=1.0)
            for step in range(3):  # the same cell starts over: the step goes back
                log(step, d_loss=2.0)
            """
        )
    )
    await kernel.drain(0.5)
    r1, r2 = kernel.messages("runs", comm_id)[-1].data["runs"]
    assert r1["reason"] == "first" and sorted(r1["optimizers"]) == ["d_opt", "g_opt"]
    assert r1["steps"] == 10  # both optimizers' boundaries
    assert r2["reason"] == "step_backwards" and r2["steps"] == 0
    tracks = {t["name"]: t for t in kernel.messages("grads", comm_id)[-1].data["tracks"]}
    assert set(tracks) == {"d_opt", "g_opt"} and {t["run"] for t in tracks.values()} == {1}
    loss_runs = sorted(
        b["run"] for b, names in series_blocks(kernel, comm_id) if names == ["d_loss"]
    )
    assert set(loss_runs) == {1, 2}


async def test_a_run_started_in_the_load_ext_cell_has_that_cell_and_ends_with_it(
    kernel: KernelDriver,
) -> None:
    """``%load_ext`` and the training loop in one cell (a common first cell): the cell's
    pre_run_cell came before the extension was there, yet the run has the cell's id and
    ``In[n]`` and ends when the cell does, not 5 s later by the idle rule."""
    code = "%load_ext jupyterlab_torchdbg\n" + SETUP + "train(5)\n"
    content = {
        "code": code,
        "silent": False,
        "store_history": True,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }
    msg = kernel.kc.session.msg("execute_request", content, metadata={"cellId": "cell-load"})
    kernel.kc.shell_channel.send(msg)
    result = await kernel.wait_execute(msg["header"]["msg_id"], code=code)
    assert result.ok, result
    comm_id = await kernel.open_comm()  # at once: well within the 5 s idle rule
    await kernel.drain(0.3)
    runs = kernel.messages("runs", comm_id)[0].data
    assert runs["current"] is None  # ended with its cell
    (run,) = runs["runs"]
    assert (run["cell_id"], run["steps"]) == ("cell-load", 5)
    assert run["execution_count"] == result.reply["content"]["execution_count"]
    assert run["end"] is not None


async def test_the_panels_silent_auto_load_is_not_taken_for_a_cell(kernel: KernelDriver) -> None:
    """The panel loads the kernel side with a silent execute request, for which IPython
    fires no cell events: taking it as a running cell would never end it, and every later
    cell would think another one still runs (it comes on a subshell's thread, as the
    panel's does when a subshell exists)."""
    sub = await kernel.create_subshell()
    code = "%load_ext jupyterlab_torchdbg"
    content = {"code": code, "silent": True, "store_history": False, "user_expressions": {}}
    msg_id = kernel.send_shell("execute_request", content, subshell_id=sub)
    reply = await kernel.wait_execute(msg_id, code=code)
    assert reply.ok, reply
    running = await kernel.value(
        "__import__('jupyterlab_torchdbg.kernel.extension').kernel.extension.current()._cells"
    )
    assert running.count(",") == 0 and running not in ("set()", "None"), running  # only this cell
