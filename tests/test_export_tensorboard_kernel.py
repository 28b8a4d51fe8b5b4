"""``export_tensorboard`` in a real kernel (issue #24 part 4): a trained run's logged loss
and gradient norms, and a run's NaN alarm, read back from the event files with
TensorBoard's own reader; unknown runs and absent run records refused."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from kernel_client import KernelDriver
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

SETUP = textwrap.dedent(
    """
    import json, os, sys, tempfile
    import torch
    from torch import nn
    from jupyterlab_torchdbg import log
    os.chdir(tempfile.mkdtemp())
    os.environ["JPY_SESSION_NAME"] = os.path.join(os.getcwd(), "train.ipynb")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    def train(steps, nan_at=None):
        losses = []
        for i in range(steps):
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            if i + 1 == nan_at:
                model[0].weight.grad[0, 0] = float("nan")
            opt.step()
            log(loss=loss.item())
            losses.append(loss.item())
        return losses
    """
)


def read_back(directory: Path) -> EventAccumulator:
    acc = EventAccumulator(str(directory))
    acc.Reload()
    return acc


async def test_export_a_run_and_read_it_back(kernel: KernelDriver) -> None:
    await kernel.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    comm_id = await kernel.open_comm()
    hello = kernel.messages("hello", comm_id)[-1].data
    assert hello["capabilities"]["tensorboard"]["available"] is True
    assert "export_tensorboard" in hello["actions"]
    # found without importing it: loading and hello leave tensorboard out of the kernel
    assert await kernel.value("'tensorboard' in sys.modules") == "False"
    await kernel.run("losses = train(30)")
    await kernel.run("model[0].reset_parameters(); model[2].reset_parameters()")
    await kernel.run("train(8, nan_at=4)")
    await kernel.drain(0.3)
    cwd = Path(await kernel.value("os.getcwd()"))
    logged = json.loads(await kernel.value("json.dumps(losses)"))

    reply = await kernel.action(comm_id, "export_tensorboard", {"run": 1, "kernel": None})
    assert reply["method"] == "ack", reply
    path = reply["result"]["path"]
    assert path.startswith("torchdbg-runs/train-run1-")
    acc = read_back(cwd / path)
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == list(range(1, 31))
    assert [e.value for e in loss] == pytest.approx(logged, rel=1e-6)
    tags = acc.Tags()["scalars"]
    assert "grad/opt/total" in tags and len([t for t in tags if t.startswith("grad/opt/")]) >= 3
    assert [e.step for e in acc.Scalars("grad/opt/total")] == list(range(1, 31))
    assert reply["result"]["scalars"] == sum(len(acc.Scalars(t)) for t in tags)
    assert acc.Tags()["tensors"] == []  # no alarm in this run: no text

    reply = await kernel.action(comm_id, "export_tensorboard", {"run": 2, "kernel": None})
    assert reply["method"] == "ack", reply
    acc = read_back(cwd / reply["result"]["path"])
    assert [e.step for e in acc.Scalars("loss")] == list(range(1, 9))
    (text,) = acc.Tensors("alarms/text_summary")
    lines = text.tensor_proto.string_val[0].decode().splitlines()
    assert any(line.startswith("step 4 · model.0 · Non-finite gradient") for line in lines), lines

    reply = await kernel.action(comm_id, "export_tensorboard", {"run": 7, "kernel": None})
    assert reply["code"] == "refused" and "run 7 is unknown" in reply["message"]
    args = {"run": 1, "kernel": "0123456789abcdef"}
    reply = await kernel.action(comm_id, "export_tensorboard", args)
    assert reply["code"] == "refused" and "no run record" in reply["message"]
