"""The memory breakdown on CPU: exact bytes per category, shared storages once (R24)."""

from __future__ import annotations

import gc
import weakref

import torch
import torch.nn as nn

from jupyterlab_torchdbg.kernel.memory import breakdown as bd


def nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def adam_step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    opt.zero_grad()
    model(torch.randn(4, 10)).pow(2).mean().backward()
    opt.step()


def cpu_row(b: dict) -> dict:
    row = bd.device_row(b, "cpu")
    assert row is not None
    return row


def test_breakdown_exact_on_cpu_for_model_and_adam() -> None:
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    opt = torch.optim.Adam(model.parameters())
    adam_step(model, opt)
    params = list(model.parameters())
    param_bytes = sum(p.numel() * 4 for p in params)  # 325 float32 values
    assert param_bytes == 1300
    found = bd.discover({"model": model, "opt": opt})
    b = bd.compute(found, rss=10_000_000)
    row = cpu_row(b)
    assert row["parameters"] == param_bytes
    assert row["gradients"] == param_bytes
    # Adam: exp_avg and exp_avg_sq per parameter (same size), plus a 0-d float32 `step`.
    assert all(set(opt.state[p]) == {"step", "exp_avg", "exp_avg_sq"} for p in params)
    assert row["optimizer_state"] == 2 * param_bytes + 4 * len(params)
    assert row["total"] == 10_000_000 and row["total_source"] == "rss"
    assert row["other"] == 10_000_000 - (4 * param_bytes + 4 * len(params))
    assert b["models"] == ["model"] and b["optimizers"] == ["opt"] and b["reason"] is None


def test_shared_storages_counted_once() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = nn.Linear(8, 8, bias=False)
            self.dec = nn.Linear(8, 8, bias=False)
            self.dec.weight = self.enc.weight  # tied weights: one tensor, two names

    model = Tied()
    flat = torch.zeros(100)
    a = nn.Parameter(flat[:40].view(4, 10))  # two parameters viewing one flat buffer
    b_ = nn.Parameter(flat[40:].view(6, 10))
    holder = nn.Module()
    holder.a, holder.b = a, b_
    opt = torch.optim.SGD([*model.parameters(), a, b_], lr=0.1)
    found = bd.discover(
        # `enc` is a submodule of `model`; `opt2` steps the same parameters again.
        {"model": model, "enc": model.enc, "holder": holder, "opt": opt, "opt2": opt}
    )
    assert [k for k, _ in found.models] == ["model", "holder"]
    row = cpu_row(bd.compute(found))
    assert row["parameters"] == 8 * 8 * 4 + 100 * 4  # the tied weight once, the flat buffer once
    assert row["gradients"] == 0 and row["optimizer_state"] == 0
    assert row["other"] is None and row["total"] is None  # no RSS given


def test_a_storage_is_counted_in_its_first_category_only() -> None:
    model = nn.Linear(4, 4, bias=False)
    model.weight.grad = model.weight.detach()  # a gradient aliasing the parameter itself
    row = cpu_row(bd.compute(bd.discover({"model": model})))
    assert row["parameters"] == 64 and row["gradients"] == 0


def test_optimizers_seen_at_steps_find_models_outside_the_namespace() -> None:
    class Trainer:  # the model lives inside an object: not an nn.Module in the namespace
        def __init__(self) -> None:
            self.model = nn.Linear(10, 3)
            self.opt = torch.optim.Adam(self.model.parameters())

    t = Trainer()
    adam_step(nn.Sequential(t.model, nn.Linear(3, 10)), t.opt)
    found = bd.discover({"t": t}, seen_optimizers=[t.opt])
    row = cpu_row(bd.compute(found))
    assert row["parameters"] == (30 + 3) * 4
    assert row["gradients"] == (30 + 3) * 4
    assert row["optimizer_state"] == 2 * (30 + 3) * 4 + 4 * 2


def test_watched_models_are_found() -> None:
    model = nn.Linear(3, 3)
    found = bd.discover({}, watched=[(model, None)])
    assert len(found.models) == 1 and found.models[0][0].startswith("watched[0]")
    assert cpu_row(bd.compute(found))["parameters"] == 12 * 4


def test_nothing_found_has_a_reason() -> None:
    b = bd.compute(bd.discover({"x": torch.zeros(3)}), rss=123)
    assert b["reason"] and "no nn.Module" in b["reason"]
    assert cpu_row(b)["other"] == 123


def test_meta_and_sparse_tensors_are_skipped_not_fatal() -> None:
    meta = nn.Linear(1000, 1000, device="meta")
    sparse = nn.Embedding(10, 4, sparse=True)
    sparse(torch.tensor([1, 2])).sum().backward()  # a sparse gradient
    b = bd.compute(bd.discover({"meta": meta, "emb": sparse}))
    row = cpu_row(b)
    assert row["parameters"] == 40 * 4 and row["gradients"] == 0
    assert "meta" not in {r["device"] for r in b["devices"]}


def test_tensor_cap_marks_truncated() -> None:
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(10)])
    b = bd.compute(bd.discover({"model": model}), max_tensors=5)
    assert b["truncated"] is True and b["tensors"] == 5


def test_r24_breakdown_keeps_no_reference() -> None:
    model = nn.Linear(100, 100)
    opt = torch.optim.Adam(model.parameters())
    adam_step(nn.Sequential(nn.Linear(10, 100), model), opt)
    refs = [weakref.ref(model), weakref.ref(opt), weakref.ref(model.weight)]
    ns = {"model": model, "opt": opt}
    bd.compute(bd.discover(ns, seen_optimizers=[opt]))
    del model, opt
    ns.clear()
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
