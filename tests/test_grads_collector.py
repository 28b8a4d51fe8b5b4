"""Gradient norms: equal to torch's own, for every kind of parameter (R30, R33).

The reference for a parameter is ``torch.linalg.vector_norm(p.grad)`` (in fp32 for
low-precision grads, of the dense values for sparse ones); for the total it is
``torch.nn.utils.get_total_norm``; for a layer, the norm of its grads concatenated.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from grads_support import session

from jupyterlab_torchdbg.kernel.grads import collector
from jupyterlab_torchdbg.kernel.grads.collector import Layout, grad_row, one_norm


def ref_norm(g: torch.Tensor) -> float:
    if g.layout != torch.strided:
        g = g.to_dense()
    if g.dtype in (torch.float16, torch.bfloat16):
        g = g.float()
    return float(torch.linalg.vector_norm(g))


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int, x: torch.Tensor) -> list:
    """Train ``steps`` steps, returning each step's grads as seen right before step()."""
    seen = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).float().pow(2).mean().backward()
        seen.append(
            [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
        )
        opt.step()
    return seen


def test_grad_row_matches_vector_norm_per_tensor() -> None:
    torch.manual_seed(0)
    grads = [torch.randn(5, 3), torch.randn(7), torch.randn(2, 2, 2) * 1e3]
    params = [nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    row = grad_row(params)
    assert row is not None and row.present == 3
    expected = torch.stack([torch.linalg.vector_norm(g) for g in grads])
    torch.testing.assert_close(row.values, expected)


def test_layout_total_equals_get_total_norm_and_layers_are_concatenations() -> None:
    torch.manual_seed(1)
    grads = [torch.randn(50, 20) * s for s in (1.0, 0.01, 30.0, 2.0)]
    params = [nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    row = grad_row(params)
    assert row is not None
    out = Layout([0, 1, 0, 1], 2, amp=False)(row.values.unsqueeze(0))[0]
    total = torch.nn.utils.get_total_norm(grads)
    assert math.isclose(float(out[0]), float(total), rel_tol=1e-6)
    for j, idx in enumerate(([0, 2], [1, 3])):
        cat = torch.cat([grads[i].flatten() for i in idx])
        assert math.isclose(float(out[1 + j]), float(torch.linalg.vector_norm(cat)), rel_tol=1e-6)


def test_r33_grad_none_is_zero_and_row_keeps_its_shape() -> None:
    params = [nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(4))]
    params[1].grad = torch.full((4,), 2.0)
    row = grad_row(params)
    assert row is not None and row.present == 1
    assert row.values.tolist() == [0.0, 4.0]
    params[1].grad = None
    assert grad_row(params) is None


def test_r33_sparse_grad_uses_the_fallback_and_is_exact() -> None:
    # An uncoalesced COO grad with a duplicate index: the norm is of the summed values.
    idx = torch.tensor([[0, 0, 2]])
    sparse = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0, 4.0]), (5,))
    dense = torch.randn(3)
    params = [nn.Parameter(torch.zeros(5)), nn.Parameter(torch.zeros(3))]
    params[0].grad, params[1].grad = sparse, dense
    row = grad_row(params)
    assert row is not None
    torch.testing.assert_close(row.values, torch.tensor([5.0, ref_norm(dense)]))
    assert float(one_norm(sparse)) == pytest.approx(5.0)


def test_r33_sparse_embedding_through_the_hook() -> None:
    torch.manual_seed(2)
    model = nn.Sequential(nn.Embedding(20, 4, sparse=True))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        seen = train(model, opt, 3, torch.tensor([1, 1, 3]))
        s.end_cell()
        got = s.comm.series()["grad/opt/model.0"][1]
        assert got.tolist() == pytest.approx([ref_norm(g[0]) for g in seen], rel=1e-6)
        assert not s.ext.errors


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_r33_low_precision_norms_in_fp32(dtype: torch.dtype) -> None:
    # 300 * 300 = 90,000 > fp16's max (65,504): an fp16 reduction would give inf.
    g = torch.full((1000,), 300.0, dtype=dtype)
    p = nn.Parameter(torch.zeros(1000, dtype=dtype))
    p.grad = g
    row = grad_row([p])
    assert row is not None
    assert row.values.dtype == torch.float32
    assert float(row.values[0]) == pytest.approx(ref_norm(g), rel=1e-3)
    assert math.isfinite(float(row.values[0]))


def test_r33_complex_grad_gives_the_real_norm() -> None:
    g = torch.tensor([3 + 4j, 1 - 1j], dtype=torch.complex64)
    p = nn.Parameter(torch.zeros(2, dtype=torch.complex64))
    p.grad = g
    row = grad_row([p])
    assert row is not None
    assert not row.values.is_complex()
    assert float(row.values[0]) == pytest.approx(math.sqrt(25 + 2))
    assert float(one_norm(g.conj())) == pytest.approx(math.sqrt(27))


def test_r33_mixed_dtypes_keep_parameter_order() -> None:
    grads = [
        torch.ones(4, dtype=torch.float64),
        torch.ones(9),
        torch.ones(16, dtype=torch.bfloat16),
    ]
    params = [nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    row = grad_row(params)
    assert row is not None
    assert row.values.tolist() == pytest.approx([2.0, 3.0, 4.0])


def test_r33_frozen_and_tied_parameters() -> None:
    """Frozen params are not monitored; a tied weight is one tensor, counted once."""

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 6)
            self.body = nn.Linear(6, 6)
            self.frozen = nn.Linear(6, 6)
            self.head = nn.Linear(6, 10, bias=False)
            self.head.weight = self.emb.weight  # tied
            self.frozen.requires_grad_(False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.frozen(self.body(self.emb(x))))

    torch.manual_seed(3)
    model = Tied()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        x = torch.tensor([1, 2, 3])
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        trainable = [p for p in model.parameters() if p.requires_grad]
        expected_total = float(torch.nn.utils.get_total_norm([p.grad for p in trainable]))
        emb_norm = ref_norm(model.emb.weight.grad)
        opt.step()
        s.end_cell()
        track = s.track()
        names = [li["name"] for li in track["layers"]]
        assert names == ["model.emb", "model.body"]  # no frozen, no separate head
        assert [p["name"] for p in track["layers"][0]["params"]] == ["model.emb.weight"]
        series = s.comm.series()
        assert float(series["grad/opt/total"][1][0]) == pytest.approx(expected_total, rel=1e-6)
        assert float(series["grad/opt/model.emb"][1][0]) == pytest.approx(emb_norm, rel=1e-6)


def test_norms_equal_reference_through_the_step_hook() -> None:
    """Every step's total equals get_total_norm and every layer its concatenated norm."""
    torch.manual_seed(4)
    model = nn.Sequential(
        nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 20), nn.Tanh(), nn.Linear(20, 3)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # weights as the first step sees them (the hook runs before the update)
    initial_weight_norm = float(torch.nn.utils.get_total_norm(list(model.parameters())))
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        seen = train(model, opt, 25, torch.randn(8, 10))
        s.end_cell()
        series = s.comm.series()
        xs, total = series["grad/opt/total"]
        assert xs.tolist() == list(range(1, 26))
        expected = [float(torch.nn.utils.get_total_norm(g)) for g in seen]
        assert total.tolist() == pytest.approx(expected, rel=1e-6)
        for j, layer in enumerate(("model.0", "model.2", "model.4")):
            ref = [
                float(torch.linalg.vector_norm(torch.cat([g[2 * j].flatten(), g[2 * j + 1]])))
                for g in seen
            ]
            assert series[f"grad/opt/{layer}"][1].tolist() == pytest.approx(ref, rel=1e-6)
        # parameter (weight) norms: sampled at most once a second, equal to the weights' norm
        pxs, ptotal = series["param/opt/total"]
        assert pxs[0] == 1 and len(pxs) < 25  # first step, then at most once a second
        assert float(ptotal[0]) == pytest.approx(initial_weight_norm, rel=1e-6)


def test_r30_dtype_change_after_attaching() -> None:
    """.double() / .to(bfloat16) after the monitor saw the model: still the right norms."""
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(6, 6), nn.Linear(6, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        train(model, opt, 2, torch.randn(4, 6))
        model.double()
        seen = train(model, opt, 2, torch.randn(4, 6, dtype=torch.float64))
        model.to(torch.bfloat16)
        seen += train(model, opt, 2, torch.randn(4, 6, dtype=torch.bfloat16))
        s.end_cell()
        total = s.comm.series()["grad/opt/total"][1][2:]
        expected = [math.sqrt(sum(ref_norm(g) ** 2 for g in step)) for step in seen]
        assert total.tolist() == pytest.approx(expected, rel=1e-3)
        assert s.track()["state"] == "active"
        assert not s.ext.errors


def test_r30_load_state_dict_assign_says_detached_not_stale() -> None:
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(4, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ns = {"model": model, "opt": opt}
    with session(ns) as s:
        s.comm.action("set_stride", {"stride": 1})
        train(model, opt, 2, torch.randn(2, 4))
        fresh = {k: v.clone() for k, v in model.state_dict().items()}
        model.load_state_dict(fresh, assign=True)  # new Parameter objects
        train(model, opt, 2, torch.randn(2, 4))  # the old optimizer steps nothing
        s.end_cell()
        track = s.track()
        assert track["state"] == "no_grads"
        assert "create the optimizer again" in track["reason"]
        assert len(s.comm.series()["grad/opt/total"][0]) == 2  # nothing stale recorded
        # a new optimizer over the new parameters is monitored under the same name; the
        # old one is gone, so it is a new run (runs.py: a sweep's next trial), from step 1
        ns["opt"] = opt = torch.optim.SGD(model.parameters(), lr=0.01)
        train(model, opt, 2, torch.randn(2, 4))
        s.end_cell()
        xs = s.comm.series()["grad/opt/total"][0]
        assert xs.tolist() == [1, 2, 1, 2]
        assert s.track()["run"] == 2 and s.track()["state"] == "active"


def test_collector_never_syncs_on_cpu_tensors_it_creates() -> None:
    """The row is a tensor on the grads' device: no .item()/.tolist() in the hot path."""
    p = nn.Parameter(torch.zeros(3))
    p.grad = torch.ones(3)
    row = grad_row([p], scale=torch.tensor(8.0), amp=True)
    assert row is not None
    assert isinstance(row.values, torch.Tensor) and row.values.shape == (2,)
    assert row.values.tolist() == pytest.approx([math.sqrt(3), 8.0])
    row = grad_row([p], scale=None, amp=True)
    assert row is not None and math.isnan(float(row.values[1]))
    assert collector._nans  # the NaN placeholder is cached, not re-created per step


def test_r35_sharded_grads_are_read_locally_and_labelled() -> None:
    """A DTensor-like grad: its local shard is reduced (no collective), flagged local."""

    class ShardedTensor(torch.Tensor):
        pass

    g = torch.zeros(8).as_subclass(ShardedTensor)
    g._local_tensor = torch.full((4,), 2.0)  # type: ignore[attr-defined]
    p = nn.Parameter(torch.zeros(8))
    p.grad = g
    row = grad_row([p])
    assert row is not None and row.local_shard is True
    assert float(row.values[0]) == pytest.approx(4.0)  # norm of the local shard
