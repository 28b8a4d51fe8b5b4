"""A rank names its layers as the kernel does (issue #25 part 1: one core).

The worker's reader builds the kernel's own plan (kernel/grads/naming.py ``build_plan``)
on the stepping thread's frames, so a rank's layer names are the ones the notebook's
gradients panel shows for the same model: the variable's name first (``model.encoder.0``),
the largest model first, wrapper levels dropped, the model's order (not the optimizer's),
more than ``MAX_LAYERS`` merged into their parents, ``watch()``'s scope. Each test reads
through ``Reader`` in a frame, and the kernel's gradients track of the same namespace
(grads_support.session, an in-process kernel extension) where the comparison says more.
"""

from __future__ import annotations

import gc
import sys
import warnings
import weakref
from types import FrameType

import pytest
import torch
from grads_support import session
from test_grads_naming import Net
from torch import nn

import jupyterlab_torchdbg
from jupyterlab_torchdbg.kernel import watches
from jupyterlab_torchdbg.kernel.backward_boundary import ModelSource
from jupyterlab_torchdbg.kernel.grads import naming
from jupyterlab_torchdbg.ranks.wire import transport as wire
from jupyterlab_torchdbg.ranks.worker.reader import Reader


def backward(model: nn.Module) -> None:
    model.zero_grad()
    model(torch.randn(3, 4)).pow(2).mean().backward()


def kernel_names(ns: dict[str, object], model: nn.Module, opt: torch.optim.Optimizer) -> list[str]:
    """The layer names the notebook kernel's gradients track gives this namespace."""
    with session(ns) as s:
        backward(model)
        opt.step()
        return [layer["name"] for layer in s.track()["layers"]]


def read_names(opt: torch.optim.Optimizer | ModelSource, frame: FrameType) -> list[str] | None:
    return Reader().read(opt, frame).names


def test_a_rank_names_layers_as_the_notebook_kernel_does() -> None:
    model = Net()
    enc = model.encoder  # a part of the model: the whole model names the parameters
    ddp = nn.DataParallel(model)  # a wrapper (on the CPU, DataParallel: a ``module.`` level)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    backward(model)
    names = read_names(opt, sys._getframe())
    assert names == ["model.encoder.0", "model.encoder.2", "model.head"]
    ns: dict[str, object] = {"model": model, "enc": enc, "ddp": ddp, "opt": opt}
    assert names == kernel_names(ns, model, opt)


def test_a_wrapper_bound_first_names_without_its_level() -> None:
    ddp = nn.DataParallel(Net())  # only the wrapper is bound: DDP's and DP's ``module.`` goes
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    backward(ddp)
    assert read_names(opt, sys._getframe()) == ["ddp.encoder.0", "ddp.encoder.2", "ddp.head"]


def test_layers_are_in_the_models_order_not_the_optimizers() -> None:
    model = Net()
    opt = torch.optim.SGD(
        [{"params": model.head.parameters()}, {"params": model.encoder.parameters(), "lr": 1e-3}],
        lr=0.1,
    )
    backward(model)
    read = Reader().read(opt, sys._getframe())
    assert read.names == ["model.encoder.0", "model.encoder.2", "model.head"]
    # each layer's norm is of its own parameters, whatever their order in the optimizer
    head = [p.grad for p in model.head.parameters()]
    assert read.layers is not None
    assert read.layers[2] == pytest.approx(float(torch.nn.utils.get_total_norm(head)), rel=1e-6)  # type: ignore[arg-type]
    assert read.names == kernel_names({"model": model, "opt": opt}, model, opt)


def test_a_method_of_the_model_names_it_by_its_variable_not_self() -> None:
    class Trainer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)
            self.opt = torch.optim.SGD(self.fc.parameters(), lr=0.1)

        def names(self) -> list[str] | None:
            self.fc(torch.randn(2, 4)).sum().backward()
            return read_names(self.opt, sys._getframe())

    net = Trainer()
    assert net.names() == ["net.fc"]  # ``self`` only where no other name binds it

    def alone() -> list[str] | None:
        return Trainer().names()

    assert alone() == ["self.fc"]


def test_more_layers_than_the_limit_are_merged_into_their_parents() -> None:
    model = nn.Sequential(
        *[nn.Sequential(*[nn.Linear(2, 2) for _ in range(30)]) for _ in range(30)]
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(1, 2)).sum().backward()
    read = Reader().read(opt, sys._getframe())
    assert read.names is not None and len(read.names) == 30  # 900 layers -> their 30 parents
    assert read.names[0] == "model.0" and read.layers is not None and len(read.layers) == 30
    assert read.norm == pytest.approx(
        float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])),  # type: ignore[misc]
        rel=1e-6,
    )
    assert len(read.names) <= naming.MAX_LAYERS


def test_a_tied_parameter_is_read_once() -> None:
    emb = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = emb.weight  # tied, as a language model's embedding and output layer

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.head = emb, head

    model = Tied()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.head(model.emb(torch.tensor([1, 2]))).sum().backward()
    read = Reader().read(opt, sys._getframe())
    assert read.names == ["model.emb"] and len(read.params) == 1
    assert read.norm == pytest.approx(float(torch.linalg.vector_norm(emb.weight.grad)), rel=1e-6)  # type: ignore[arg-type]


def test_unnamed_parameters_are_named_after_the_optimizer() -> None:
    models = {"a": nn.Linear(4, 2)}  # inside a dict: no module names them
    optimizer_b = torch.optim.SGD(models["a"].parameters(), lr=0.1)
    models["a"](torch.randn(2, 4)).sum().backward()
    names = read_names(optimizer_b, sys._getframe())
    assert names == ["optimizer_b.group0.p0", "optimizer_b.group0.p1"]


def test_a_loop_without_an_optimizer_is_named_after_its_model() -> None:
    model = Net()
    source = ModelSource(model, "model", list(model.parameters()))
    backward(model)
    read = Reader().read(source, sys._getframe())
    assert read.names == ["model.encoder.0", "model.encoder.2", "model.head"]
    assert read.module is model and read.module_name == "model"


def test_watch_in_a_rank_scopes_what_it_reports_and_does_not_warn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(wire.ENDPOINT_ENV, "ipc:///nonexistent")  # as a rank of the notebook
    a, b = Net(), Net()
    opt = torch.optim.SGD([*a.parameters(), *b.parameters()], lr=0.1)
    reader = Reader()
    backward(a)
    backward(b)
    assert reader.read(opt, sys._getframe()).names == [
        "a.encoder.0",
        "a.encoder.2",
        "a.head",
        "b.encoder.0",
        "b.encoder.2",
        "b.head",
    ]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "not loaded" is the notebook's warning, not a rank's
            handle = jupyterlab_torchdbg.watch(b)
        read = reader.read(opt, sys._getframe())  # the watch changes the plan at once
        assert read.names == ["b.encoder.0", "b.encoder.2", "b.head"]
        assert read.norm == pytest.approx(
            float(torch.nn.utils.get_total_norm([p.grad for p in b.parameters()])),  # type: ignore[misc]
            rel=1e-6,
        )
        handle.remove()
        assert len(reader.read(opt, sys._getframe()).names or []) == 6
    finally:
        watches.clear_watches()


def test_r24_a_ranks_layout_keeps_no_model_or_optimizer_alive() -> None:
    reader = Reader()

    def train() -> tuple[weakref.ref[nn.Module], weakref.ref[torch.optim.Optimizer]]:
        # a training function of its own: reading its frame's locals (f_locals) keeps a
        # snapshot of them in that frame until it returns, whatever the reader keeps
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        backward(model)
        assert reader.read(opt, sys._getframe()).module is model
        return weakref.ref(model), weakref.ref(opt)

    model_ref, opt_ref = train()
    gc.collect()
    assert model_ref() is None and opt_ref() is None
    assert len(reader._layouts) == 0  # the layout went with its optimizer
