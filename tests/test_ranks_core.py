"""One core for the kernel and the ranks (issue #25 part 1): a worker reads and clips as
the kernel does.

- The reader's per-tensor norms are the kernel's read (kernel/grads/collector.py), one
  row left on the gradients' device (``Read.norms``); the host figures come from it.
- An agreed clip reuses that read through the kernel's ``Clipper``: bit for bit what
  ``clip_grad_norm_`` gives, with no second read of the gradients; without a read (or
  for a fused optimizer's still scaled gradients) it reads once itself, still exact.
- While clipping, every step is read (the clip needs this step's norms).
- A read whose norms are still on their way from an accelerator is finished on the
  agent's thread (``take_rows``), never on the training thread; its row then carries the
  norms and the detector gets the read (GPU: tests/gpu/test_ranks_gpu.py).
- Only kernel/extension.py registers IPython's cell events (tests/test_architecture.py).
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest
import torch
from torch import nn

from jupyterlab_torchdbg.kernel.grads.collector import one_norm
from jupyterlab_torchdbg.ranks.wire.packed import unpack
from jupyterlab_torchdbg.ranks.worker.agreed import Agreements
from jupyterlab_torchdbg.ranks.worker.boundary import Worker
from jupyterlab_torchdbg.ranks.worker.reader import Read, Reader


def _model_and_grads(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(16, 8) * 30).pow(2).mean().backward()
    return model, opt


def test_the_reader_reads_the_kernels_way_and_keeps_the_row_on_the_device() -> None:
    model, opt = _model_and_grads()
    read = Reader().read(opt, sys._getframe())
    assert isinstance(read.norms, torch.Tensor) and read.pending is None
    expected = [float(one_norm(p.grad)) for p in model.parameters()]  # type: ignore[arg-type]
    assert read.values == pytest.approx(expected, rel=1e-6)
    total = float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]))
    assert read.norm == pytest.approx(total, rel=1e-6)
    assert read.names == ["model.0", "model.2"] and read.module is model  # the kernel's names


@pytest.mark.parametrize("reuse", [True, False])
def test_an_agreed_clip_is_clip_grad_norm_bit_for_bit_reusing_the_read(reuse: bool) -> None:
    model, opt = _model_and_grads()
    reference = copy.deepcopy(model)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        q.grad = p.grad.clone()  # type: ignore[union-attr]
    torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)

    agreed = Agreements(lambda kind, content: None)
    agreed.clip = 0.05
    if reuse:
        agreed.read = (opt, 7, Reader().read(opt, sys._getframe()))
    agreed.clip_now(opt, 7)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)  # type: ignore[arg-type]
    assert agreed.clips_reused == (1 if reuse else 0)
    assert agreed.clip_refusals == []


def test_a_read_of_another_step_or_optimizer_is_not_reused() -> None:
    _, opt = _model_and_grads()
    _, other = _model_and_grads(1)
    agreed = Agreements(lambda kind, content: None)
    agreed.clip = 1.0
    read = Reader().read(opt, None)
    agreed.read = (opt, 3, read)
    agreed.clip_now(opt, 4)  # the read is of step 3
    agreed.clip_now(other, 3)  # and of another optimizer
    assert agreed.clips_reused == 0


def test_a_non_finite_total_is_not_clipped_and_says_why() -> None:
    model, opt = _model_and_grads()
    model[0].weight.grad[0, 0] = float("nan")  # type: ignore[index]
    before = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
    agreed = Agreements(lambda kind, content: None)
    agreed.clip = 0.05
    agreed.read = (opt, 2, Reader().read(opt, None))
    agreed.clip_now(opt, 2)
    after = [p.grad for p in model.parameters()]
    assert all(_same(a, b) for a, b in zip(before, after, strict=True))
    assert agreed.clip_refusals and "step 2: total gradient norm is nan" in agreed.clip_refusals[0]


def _same(a: torch.Tensor, b: Any) -> bool:
    return bool(torch.allclose(a, b, equal_nan=True))


class _Landing:
    """A copy still in flight from a device, as ``DeviceRow``: its values once waited."""

    def __init__(self, values: list[float]) -> None:
        self.values = values
        self.waited = 0

    def ready(self) -> bool:
        return False

    def wait(self) -> list[float]:
        self.waited += 1
        return self.values


def test_rows_whose_norms_are_in_flight_are_finished_on_the_agents_thread() -> None:
    worker = Worker("ipc:///nonexistent", "k")
    try:
        read = Read(None, None, None)
        read.which, read.all_names = [0, 0, 1], ["enc", "head"]
        landing = _Landing([3.0, 4.0, 12.0])
        read.pending = landing  # type: ignore[assignment]
        row: dict[str, Any] = {"step": 8, "norm": None, "_pending": True}
        worker._in_flight.append((row, read))
        worker._rows.append(row)
        assert read.norm is None  # nothing read on the training thread
        (sent,) = worker.take_rows(10)
        assert landing.waited == 1 and sent is row and "_pending" not in sent
        assert sent["norm"] == 13.0  # sqrt(9 + 16 + 144)
        layers = worker.take_layers()
        assert layers is not None and (layers["step"], layers["names"]) == (8, ["enc", "head"])
        assert unpack(layers.get("packed"), 512) == [5.0, 12.0]  # as one string
        assert read.norms is None and read.params == []  # nothing outlives the read
        assert worker.signals._reads[-1] == (8, [13.0, 5.0, 12.0])  # the detector got it
    finally:
        worker.close("exited")


def test_while_clipping_every_step_is_read_whatever_the_stride() -> None:
    model, opt = _model_and_grads()
    worker = Worker("ipc:///nonexistent", "k")
    worker.ensure_agent = lambda: None  # type: ignore[method-assign]
    try:
        worker.stride = 64
        worker.agreed.clip = 10.0
        for _ in range(3):
            model(torch.randn(16, 8)).pow(2).mean().backward()
            worker.before_step(opt)
        rows = list(worker._rows)
        assert [r["step"] for r in rows] == [1, 2, 3]
        assert all(r["norm"] is not None for r in rows)
        assert worker.agreed.clips_reused == 3
        assert worker.agreed.read is None  # the step's read ended with the step
    finally:
        worker.close("exited")
