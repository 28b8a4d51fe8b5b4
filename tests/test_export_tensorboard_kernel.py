"""``export_tensorboard`` in a real kernel (issue #24 part 4): a trained run's logged loss
and gradient norms, and a run's NaN alarm, read back from the event files with
TensorBoard's own reader; unknown runs and absent run records refused."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    # this kernel was started for no notebook: no record to read from
    assert reply["code"] == "refused" and "no run record" in reply["message"].lower()


async def test_export_a_recorded_run_of_an_earlier_kernel(
    jp_start_kernel: Callable[..., Any], tmp_path: Path
) -> None:
    """The run store's read (``Recorder.load_run``): a run of a kernel that shut down,
    exported from the next kernel of the same notebook."""
    env = {
        **os.environ,
        "PYTHONWARNINGS": "ignore::DeprecationWarning",
        "OMP_NUM_THREADS": "1",
        "JPY_SESSION_NAME": str(tmp_path / "train.ipynb"),
        "TORCHDBG_RECORD_DIR": str(tmp_path / "records"),
    }
    km, kc = await jp_start_kernel(env=env)
    first = KernelDriver(kc)
    await first.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    await first.run("losses = train(30)")
    logged = json.loads(await first.value("json.dumps(losses)"))
    await first.drain(0.5)
    await km.shutdown_kernel(now=False)
    _km2, kc2 = await jp_start_kernel(env=env)
    second = KernelDriver(kc2)
    await second.run("%load_ext jupyterlab_torchdbg\n" + SETUP)
    comm = await second.open_comm()
    await second.pump_until(
        lambda: any(m.data["kernels"] for m in second.messages("record", comm)), 15
    )
    dead = next(m.data for m in second.messages("record", comm) if m.data["kernels"])
    kernel_id = dead["kernels"][0]["id"]
    args = {"run": 1, "kernel": kernel_id}
    reply = await second.action(comm, "export_tensorboard", args)
    assert reply["method"] == "ack", reply
    assert reply["result"]["path"].startswith("torchdbg-runs/train-run1-")
    cwd = Path(await second.value("os.getcwd()"))
    acc = read_back(cwd / reply["result"]["path"])
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == list(range(1, 31))
    assert [e.value for e in loss] == pytest.approx(logged, rel=1e-6)
    assert "grad/opt/total" in acc.Tags()["scalars"]
    reply = await second.action(comm, "export_tensorboard", {"run": 9, "kernel": kernel_id})
    assert reply["code"] == "refused" and "no run 9" in reply["message"]
