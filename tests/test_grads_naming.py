"""Names, scope and references: watch(), namespace models, wrappers (R24, R29)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.nn as nn
from grads_support import session

import jupyterlab_torchdbg
from jupyterlab_torchdbg.kernel import watches
from jupyterlab_torchdbg.kernel.grads import naming


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def step(model: nn.Module, opt: torch.optim.Optimizer, n: int = 1) -> None:
    for _ in range(n):
        opt.zero_grad()
        model(torch.randn(3, 4)).pow(2).mean().backward()
        opt.step()


def layer_names(s: object) -> list[str]:
    return [li["name"] for li in s.track()["layers"]]  # type: ignore[attr-defined]


def test_names_come_from_the_largest_namespace_module() -> None:
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # `enc` is a sub-module of `model`: the whole model names the parameters.
    with session({"enc": model.encoder, "model": model, "opt": opt}) as s:
        step(model, opt)
        assert layer_names(s) == ["model.encoder.0", "model.encoder.2", "model.head"]
        assert s.track()["name"] == "opt"


def test_unnamed_parameters_fall_back_to_the_optimizer() -> None:
    models = {"a": Net()}  # held inside a dict: not a namespace module
    opt = torch.optim.SGD(models["a"].parameters(), lr=0.1)
    with session({"models": models, "optimizer_b": opt}) as s:
        step(models["a"], opt)
        names = layer_names(s)
        assert names[0] == "optimizer_b.group0.p0" and len(names) == 6


def test_watch_names_a_model_and_limits_scope() -> None:
    a, b = Net(), Net()
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
    with session({"a": a, "b": b, "opt_a": opt_a, "opt_b": opt_b}) as s:
        handle = jupyterlab_torchdbg.watch(a, stride=1)
        step(a, opt_a, 3)
        step(b, opt_b, 3)
        tracks = {t["name"]: t for t in s.status()["tracks"]}
        assert tracks["opt_a"]["state"] == "active" and tracks["opt_a"]["sampled"] == 3
        assert tracks["opt_a"]["mode"] == "fixed" and tracks["opt_a"]["stride"] == 1
        assert tracks["opt_b"]["state"] == "disabled"
        assert "watch" in tracks["opt_b"]["reason"]
        handle.remove()
        step(b, opt_b, 1)
        tracks = {t["name"]: t for t in s.status()["tracks"]}
        assert tracks["opt_b"]["state"] == "active"  # no watch left: everything monitored


def test_watch_handle_is_a_context_manager_and_removal_is_idempotent() -> None:
    model = Net()
    with session({}) as s:
        with jupyterlab_torchdbg.watch(model) as h:
            assert h.active and watches.watches()[1] == [h]
        assert not h.active and watches.watches()[1] == []
        h.remove()
        assert "removed" in repr(h)
        assert s.ext.errors == {}


def test_watch_validates_its_arguments() -> None:
    with pytest.raises(TypeError):
        jupyterlab_torchdbg.watch(object())
    with pytest.raises(TypeError):
        jupyterlab_torchdbg.watch(Net(), optimizer=object())
    with pytest.raises(ValueError):
        jupyterlab_torchdbg.watch(Net(), stride=0)
    with pytest.raises(TypeError):
        jupyterlab_torchdbg.watch(Net(), stride=1.5)  # type: ignore[arg-type]


def test_watch_without_the_extension_warns_and_applies_later() -> None:
    watches.clear_watches()
    model = Net()
    with pytest.warns(RuntimeWarning, match="not loaded"):
        h = jupyterlab_torchdbg.watch(model, stride=2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"m": model, "opt": opt}, keep_watches=True) as s:
        step(model, opt, 4)
        assert s.track()["sampled"] == 2
        assert s.track()["mode"] == "fixed"
        h.remove()


def test_wrappers_are_not_part_of_the_names() -> None:
    model = Net()
    dp = nn.DataParallel(model)  # on CPU a plain wrapper with a `module.` prefix
    assert naming.clean_param_name(dp, "module.encoder.0.weight") == "encoder.0.weight"
    assert naming.clean_param_name(model, "_orig_mod.head.bias") == "head.bias"
    assert naming.clean_param_name(model, "module.x") == "module.x"  # a real submodule
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"net": dp, "opt": opt}) as s:
        step(model, opt)
        assert layer_names(s) == ["net.encoder.0", "net.encoder.2", "net.head"]


def test_r09_many_layers_are_merged_into_parents() -> None:
    model = nn.Sequential(
        *[nn.Sequential(*[nn.Linear(2, 2) for _ in range(30)]) for _ in range(30)]
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        opt.zero_grad()
        model(torch.randn(1, 2)).sum().backward()
        opt.step()
        track = s.track()
        assert track["coarsened"] is True
        assert len(track["layers"]) == 30  # 900 Linear layers -> their 30 parents
        assert track["layers"][0]["name"] == "model.0"
        assert track["layers"][0]["more_params"] == 60 - 32


def test_r24_no_strong_reference_to_model_or_optimizer() -> None:
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    ns = {"model": model, "opt": opt}
    with session(ns) as s:
        handle = jupyterlab_torchdbg.watch(model, opt)
        step(model, opt, 3)
        s.end_cell()
        refs = [weakref.ref(model), weakref.ref(opt), weakref.ref(next(model.parameters()))]
        del model, opt
        ns.clear()
        gc.collect()
        assert [r() for r in refs] == [None, None, None]
        assert handle.model is None and not handle.active
        assert len(s.monitor.tracks) == 0
        # history stays (the panel can still show it), the snapshot still works
        assert "grad/opt/total" in s.ext.stream.names()
        assert s.status()["tracks"] == []


def test_r29_jit_script_and_trace_after_attaching() -> None:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ns = {"model": model, "opt": opt}
    with session(ns) as s:
        s.comm.action("set_stride", {"stride": 1})
        step(model, opt, 2)
        ns["scripted"] = scripted = torch.jit.script(model)
        ns["traced"] = traced = torch.jit.trace(model, torch.randn(3, 4))
        for m in (scripted, traced):
            opt.zero_grad()
            m(torch.randn(3, 4)).pow(2).mean().backward()
            opt.step()
        s.end_cell()
        assert not s.ext.errors
        assert layer_names(s) == ["model.encoder.0", "model.encoder.2", "model.head"]
        assert len(s.comm.series()["grad/opt/total"][0]) == 4


def test_r29_script_module_alone_in_the_namespace_is_handled() -> None:
    model = Net()
    scripted = torch.jit.script(model)
    opt = torch.optim.SGD(scripted.parameters(), lr=0.1)
    with session({"scripted": scripted, "opt": opt}) as s:
        opt.zero_grad()
        scripted(torch.randn(3, 4)).pow(2).mean().backward()
        opt.step()
        assert s.track()["state"] == "active"
        names = layer_names(s)
        assert len(names) == 3 and all(n.startswith(("scripted.", "opt.")) for n in names)
        assert not s.ext.errors
