"""A model made in one cell and its optimizer in the training cell is one run (issue #22
item 7): the end-of-backward boundary that watched the model until the optimizer's first
step hands over without leaving a run or a track of its own behind."""

from __future__ import annotations

import textwrap

from kernel_client import KernelDriver

MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    """
)


async def _train(kernel: KernelDriver, loop: str) -> tuple[list[dict], list[dict]]:
    """Train in a cell of its own; the runs and tracks the panel got, after checking that
    nothing of the hand-updated model's boundary is left: no control target, no series
    in a late panel's snapshot."""
    await kernel.run("%load_ext jupyterlab_torchdbg\n" + MODEL)
    sub = await kernel.create_subshell()
    comm_id = await kernel.open_comm(subshell_id=sub)
    result = await kernel.run(textwrap.dedent(loop))
    assert result.ok, result
    await kernel.drain(0.5)
    runs = kernel.messages("runs", comm_id)[-1].data["runs"]
    tracks = kernel.messages("grads", comm_id)[-1].data["tracks"]
    control = kernel.messages("control", comm_id)[-1].data
    assert [t["name"] for t in control["targets"]] == ["opt"], control
    assert control["step"] == 20, control
    late = await kernel.open_comm(subshell_id=sub)
    await kernel.pump_until(lambda: bool(kernel.messages("snapshot", late)))
    names = [n for b in kernel.messages("snapshot", late)[0].data["blocks"] for n in b["names"]]
    assert "grad/opt/total" in names and not [n for n in names if n.startswith("grad/model")]
    return runs, tracks


async def test_r_item7_optimizer_made_in_the_training_cell_after_the_first_backward(
    kernel: KernelDriver,
) -> None:
    runs, tracks = await _train(
        kernel,
        """
        opt = None
        for i in range(20):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            if opt is None:
                opt = torch.optim.SGD(model.parameters(), lr=1e-2)
            opt.step()
            opt.zero_grad()
        """,
    )
    assert [(r["id"], r["steps"], r["optimizers"]) for r in runs] == [(1, 20, ["opt"])], runs
    assert [(t["name"], t["step"], t["boundary"]) for t in tracks] == [
        ("opt", 20, "optimizer_step")
    ], tracks


async def test_r_item7_optimizer_made_in_the_training_cell_before_the_first_backward(
    kernel: KernelDriver,
) -> None:
    runs, tracks = await _train(
        kernel,
        """
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for i in range(20):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
        """,
    )
    assert [(r["id"], r["steps"], r["optimizers"]) for r in runs] == [(1, 20, ["opt"])], runs
    assert [(t["name"], t["step"], t["boundary"]) for t in tracks] == [
        ("opt", 20, "optimizer_step")
    ], tracks
