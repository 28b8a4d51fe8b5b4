"""A non-finite gradient's cause, named at the step it happens, and skipping such steps.

In-process with the production hooks (grads_support.session), plus one real kernel. Each
workload trains finite steps first and turns non-finite at a known step, in a known way:
a bad input (positional, and an HF-style keyword call), a module's forward, a parent's own
forward around a finite child, the loss, backward only.
"""

from __future__ import annotations

import copy
import gc
import math
import textwrap
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from grads_support import session
from kernel_client import KernelDriver

from jupyterlab_torchdbg import log, watch

BAD = 3  # the step that goes non-finite


def causes(s: Any) -> list[dict[str, Any]]:
    return [a for a in s.comm.alerts() if a["kind"] == "non_finite_cause"]


class Net(nn.Module):
    """``fc1 -> mid -> fc2``; forward(x)."""

    def __init__(self, mid: nn.Module | None = None) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.mid = mid if mid is not None else nn.Tanh()
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.mid(self.fc1(x)))


class LogLayer(nn.Module):
    """log(|x| * scale): finite while scale > 0; scale = 0 makes log(0) = -inf."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x.abs() * self.scale + 1e-3 * self.scale)


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.proj(feats)


class Parent(nn.Module):
    """A finite child; the parent's own division makes the Inf, passed on by keyword."""

    def __init__(self) -> None:
        super().__init__()
        self.child = nn.Linear(8, 8)
        self.head = Head()
        self.denom = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(feats=self.child(x) / self.denom)


class SqrtAt(nn.Module):
    """x + sqrt(0 * x + c): finite forward; at c = 0 its backward is inf * 0 = NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.c = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.sqrt(x * 0.0 + self.c)


class ProbLoss(nn.modules.loss._Loss):
    """-log(p[target] * scale): fine at scale 1, log(0) at scale 0."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = 1.0

    def forward(self, p: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return -torch.log(p.gather(1, target[:, None]) * self.scale).mean()


def train(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    steps: int,
    batch: Callable[[int], torch.Tensor],
    before: Callable[[int], None] = lambda i: None,
    call: Callable[[nn.Module, torch.Tensor], torch.Tensor] = lambda m, x: m(x),
) -> None:
    for i in range(1, steps + 1):
        before(i)
        opt.zero_grad()
        loss = call(model, batch(i)).pow(2).mean()
        log(loss=loss)
        loss.backward()
        opt.step()


def batches(seed: int = 1, bad_at: tuple[int, ...] | None = None) -> Callable[[int], torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    data = [torch.randn(16, 4, generator=g) for _ in range(10)]

    def batch(i: int) -> torch.Tensor:
        x = data[i - 1]
        if bad_at is not None and i == BAD:
            x = x.clone()
            x[bad_at] = float("nan")
        return x

    return batch


def run_one(
    model: nn.Module, before: Callable[[int], None], steps: int = 5, **kw: Any
) -> dict[str, Any]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with session({"model": model, "opt": opt, **kw.pop("ns", {})}) as s:
        # The workloads are modules of the user's own classes: their forward is re-run
        # at the step only on the user's word (R53; without it, see test_r53_...).
        watch(model, rerun_forward=True)
        s.comm.action("set_stride", {"stride": 1})
        train(model, opt, steps, kw.pop("batch", batches()), before, **kw)
        s.end_cell()
        found = causes(s)
        assert len(found) == 1, s.comm.alerts()
        # The flush-time non_finite alarm of that step says nothing more: dropped.
        assert not [a for a in s.comm.alerts() if a["kind"] == "non_finite"]
        assert not s.ext.errors
        return found[0]


def test_a_nan_in_the_input_batch_is_named_with_its_index_at_that_step() -> None:
    torch.manual_seed(0)
    a = run_one(Net(), lambda i: None, batch=batches(bad_at=(5, 2)))
    assert a["cause"] == "input" and a["step"] == BAD and a["layer"] == "model"
    assert "`x` (16x4) at index [5, 2]" in a["message"] and "NaN" in a["message"]
    assert "data pipeline" in a["remedy"] and "learning rate" not in a["remedy"]


class HFStyle(nn.Module):
    """``model(input_ids=..., attention_mask=...)``: an embedding and a float mask."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.emb(input_ids) * attention_mask[..., None]
        return self.out(h.mean(1))


def test_a_nan_in_a_keyword_argument_of_an_hf_style_call_is_named() -> None:
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (4, 6))

    def call(m: nn.Module, mask: torch.Tensor) -> torch.Tensor:
        return m(input_ids=ids, attention_mask=mask)

    def batch(i: int) -> torch.Tensor:
        mask = torch.ones(4, 6)
        if i == BAD:
            mask[1, 3] = float("nan")
        return mask

    a = run_one(HFStyle(), lambda i: None, batch=batch, call=call)
    assert a["cause"] == "input" and a["step"] == BAD
    assert "`attention_mask` (4x6) at index [1, 3]" in a["message"]


def test_an_additive_minus_inf_mask_is_not_blamed() -> None:
    """-inf in a tensor named *mask* is how attention masks are written, not bad data."""
    from jupyterlab_torchdbg.kernel.grads.diagnose import bad_element

    mask = torch.zeros(2, 3)
    mask[0, 1] = -math.inf
    assert bad_element("attention_mask", mask) is None
    assert bad_element("x", mask) == ((0, 1), -math.inf, 1)
    mask[1, 2] = math.nan
    found = bad_element("attention_mask", mask)
    assert found is not None and found[0] == (1, 2) and math.isnan(found[1])


def test_a_module_whose_forward_makes_the_nan_is_named_with_finite_weights() -> None:
    torch.manual_seed(0)
    model = Net(LogLayer())

    def before(i: int) -> None:
        model.mid.scale = 0.0 if i == BAD else 1.0

    a = run_one(model, before)
    assert a["cause"] == "forward" and a["layer"] == "model.mid" and a["step"] == BAD
    assert "turns finite inputs into NaN/Inf" in a["message"]
    assert "log" in a["remedy"] and "checkpoint" not in a["remedy"]
    assert "already NaN/Inf" not in a["message"]  # the pre-step weights were finite


def test_the_parent_that_makes_the_nan_is_named_not_its_child_or_keyword_callee() -> None:
    torch.manual_seed(0)
    model = Net(Parent())

    def before(i: int) -> None:
        model.mid.denom = 0.0 if i == BAD else 1.0

    a = run_one(model, before)
    assert a["cause"] == "forward" and a["layer"] == "model.mid", a
    assert a["step"] == BAD


def test_a_loss_module_that_makes_the_nan_on_finite_outputs_is_the_cause() -> None:
    torch.manual_seed(0)
    model = Net()
    ce, nll = nn.CrossEntropyLoss(), ProbLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = batches()
    y = torch.randint(0, 3, (16,))
    with session({"model": model, "opt": opt, "ce": ce, "nll": nll}) as s:
        watch(model, rerun_forward=True)
        s.comm.action("set_stride", {"stride": 1})
        for i in range(1, 6):
            nll.scale = 0.0 if i == BAD else 1.0
            opt.zero_grad()
            out = model(data(i))
            loss = ce(out, y) + nll(out.softmax(-1), y)
            loss.backward()
            opt.step()
        s.end_cell()
        (a,) = causes(s)
        assert a["cause"] == "loss" and a["layer"] == "nll" and a["step"] == BAD
        assert "every module output is finite" in a["message"]
        assert "log_softmax" in a["remedy"]
        assert not s.ext.errors


def test_a_backward_only_nan_is_named_backward_and_points_to_replay() -> None:
    torch.manual_seed(0)
    model = Net(SqrtAt())

    def before(i: int) -> None:
        model.mid.c = 0.0 if i == BAD else 1.0

    a = run_one(model, before)
    assert a["cause"] == "backward" and a["step"] == BAD and a["severity"] == "warning"
    assert a["layer"] == "model.fc1"  # nearest the loss with a non-finite gradient
    assert "Replay" in a["remedy"]


class BNDrop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.drop = nn.Dropout(0.3)
        self.mid = SqrtAt()
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.mid(self.drop(self.bn(self.fc1(x)))))


def test_the_diagnosis_leaves_batchnorm_statistics_and_the_rng_as_without_the_tool() -> None:
    def run(tool: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        torch.manual_seed(0)
        model = BNDrop()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)

        def before(i: int) -> None:
            model.mid.c = 0.0 if i == BAD else 1.0

        if tool:
            with session({"model": model, "opt": opt}) as s:
                watch(model, rerun_forward=True)
                s.comm.action("set_stride", {"stride": 1})
                train(model, opt, BAD, batches(), before)
                s.end_cell()
                assert [a["cause"] for a in causes(s)] == ["backward"]
                assert not s.ext.errors
        else:
            train(model, opt, BAD, batches(), before)
        return copy.deepcopy(model.state_dict()), torch.rand(4)

    with_tool, rng_tool = run(True)
    without, rng_plain = run(False)
    assert torch.equal(rng_tool, rng_plain)
    for k, v in without.items():
        torch.testing.assert_close(with_tool[k], v, rtol=0, atol=0, equal_nan=True)
    assert torch.isfinite(with_tool["bn.running_mean"]).all()


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        lambda ps: torch.optim.Adam(ps, lr=1e-2),
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    ],
    ids=["sgd_momentum", "adam", "adamw"],
)
def test_skip_keeps_weights_and_state_bit_identical_and_trains_on(make: Any) -> None:
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    opt, ref_opt = make(model.parameters()), make(reference.parameters())
    data = batches(bad_at=(0, 0))
    with session({"model": model, "opt": opt}) as s:
        watch(model, opt, skip_nonfinite=True)
        snap: dict[str, Any] = {}
        for i in range(1, 7):
            opt.zero_grad()
            loss = model(data(i)).pow(2).mean()
            loss.backward()
            if i == BAD:
                snap["w"] = copy.deepcopy(model.state_dict())
                snap["opt"] = copy.deepcopy(opt.state_dict())
            opt.step()
            if i == BAD:
                for k, v in model.state_dict().items():
                    assert torch.equal(v, snap["w"][k]), k
                after = opt.state_dict()["state"]
                for pid, st in snap["opt"]["state"].items():
                    for key, v in st.items():
                        assert torch.equal(torch.as_tensor(after[pid][key]), torch.as_tensor(v))
                # the gradients are back after the skipped step (zero_grad sees them)
                assert all(p.grad is not None for p in model.parameters())
        s.end_cell()
        track = s.track()
        assert track["skip_nonfinite"] and track["skipped_nonfinite"] == 1
        kinds = [a["kind"] for a in s.comm.alerts()]
        assert kinds == ["non_finite_cause"], kinds
        (a,) = causes(s)
        assert a["cause"] == "input" and "skipped" in a["message"]
        assert not s.ext.errors
    # The run equals one that never saw the bad batch: bit for bit.
    for i in range(1, 7):
        if i == BAD:
            continue
        ref_opt.zero_grad()
        reference(data(i)).pow(2).mean().backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.isfinite(p).all() and torch.equal(p, q)


def test_the_skip_action_turns_skipping_on_and_clipping_is_not_applied() -> None:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        assert s.comm.action("skip_nonfinite", {"on": True})["method"] == "ack"
        for bad in ({}, {"on": 1}, {"on": True, "x": 1}):
            assert s.comm.action("skip_nonfinite", bad)["method"] == "error"
        s.comm.action("clip", {"max_norm": 1.0})
        train(model, opt, 5, batches(bad_at=(2, 1)))
        s.end_cell()
        assert s.track()["skipped_nonfinite"] == 1
        assert all(torch.isfinite(p).all() for p in model.parameters())
        assert not s.ext.errors


def hooked(*modules: nn.Module) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in modules)


def test_r01_r24_unload_removes_every_hook_and_keeps_no_model_or_batch() -> None:
    torch.manual_seed(0)
    model = Net()
    crit = nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 4)
    with session({"model": model, "opt": opt, "crit": crit}) as s:
        s.comm.action("set_stride", {"stride": 1})
        for _ in range(3):
            opt.zero_grad()
            crit(model(x), torch.zeros(16, 3)).backward()
            opt.step()
        # the model: a pre-hook (its batch) and a forward hook (backward's root); the
        # loss module: a forward hook
        assert hooked(model) == 2 and hooked(crit) == 1
        assert len(model._forward_pre_hooks) == 1 and len(crit._forward_hooks) == 1
        s.shell.user_ns.clear()
    assert hooked(model, crit) == 0
    refs = [weakref.ref(model), weakref.ref(x)]
    del model, opt, x, crit
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_the_kept_call_is_dropped_with_the_model_while_loaded() -> None:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 4, requires_grad=True)  # a graph-carrying input is detached
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        for _ in range(3):
            opt.zero_grad()
            model(x * 2).pow(2).mean().backward()
            opt.step()
        keeper = s.monitor.guard.keeper
        assert keeper is not None and keeper.hooked() == [model]
        call = keeper.call_of(model)
        assert call is not None and not call.args[0].requires_grad
        refs = [weakref.ref(model), weakref.ref(x)]
        s.shell.user_ns.clear()
        del model, opt, x, call
        gc.collect()
        assert [r() for r in refs] == [None, None]
        assert keeper.hooked() == []


def test_keeping_the_call_costs_a_few_microseconds() -> None:
    import time

    from jupyterlab_torchdbg.kernel.grads.inputs import InputKeeper

    model = nn.Identity()
    keeper = InputKeeper(lambda where: None)
    x = torch.randn(4, 4)
    n = 2000

    def per_call() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            model(x)
        return (time.perf_counter() - t0) / n

    base = min(per_call() for _ in range(3))
    keeper.sync([("model", model)], [])
    kept = min(per_call() for _ in range(3))
    keeper.clear()
    assert kept - base < 50e-6, (base, kept)  # a few µs here; generous for a busy CI


async def test_a_bad_batch_is_named_at_its_step_in_a_real_kernel(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    await loaded.run(
        textwrap.dedent(
            """
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            from jupyterlab_torchdbg import watch
            watch(model, opt, skip_nonfinite=True)
            for i in range(1, 11):
                x = torch.randn(8, 4)
                if i == 6:
                    x[2, 3] = float('inf')
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
            assert all(torch.isfinite(p).all() for p in model.parameters())
            """
        )
    )
    await loaded.drain(0.3)
    alerts = [a for m in loaded.messages("alert", comm_id) for a in m.data["alerts"]]
    found = [a for a in alerts if a["kind"] == "non_finite_cause"]
    assert len(found) == 1, alerts
    assert found[0]["cause"] == "input" and found[0]["step"] == 6
    assert "at index [2, 3]" in found[0]["message"] and "+Inf" in found[0]["message"]
    track = loaded.messages("grads", comm_id)[-1].data["tracks"][0]
    assert track["skipped_nonfinite"] == 1


def test_cross_entropy_alone_is_not_blamed() -> None:
    """A finite CrossEntropyLoss of this batch is no cause: the backward is."""
    torch.manual_seed(0)
    model = Net(SqrtAt())
    ce = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    y = torch.randint(0, 3, (16,))
    data = batches()
    with session({"model": model, "opt": opt, "ce": ce}) as s:
        watch(model, rerun_forward=True)
        s.comm.action("set_stride", {"stride": 1})
        for i in range(1, 5):
            model.mid.c = 0.0 if i == BAD else 1.0
            opt.zero_grad()
            F.relu(ce(model(data(i)), y)).backward()
            opt.step()
        s.end_cell()
        assert [a["cause"] for a in causes(s)] == ["backward"]


def test_r28_a_compiled_model_is_diagnosed_through_its_wrapper_without_graph_breaks() -> None:
    dynamo = pytest.importorskip("torch._dynamo")
    from torch._dynamo.utils import counters

    def run(tool: bool) -> tuple[int, list[dict[str, Any]]]:
        dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        model = Net(LogLayer())
        compiled = torch.compile(model, backend="eager")
        opt = torch.optim.SGD(model.parameters(), lr=0.05)

        def before(i: int) -> None:
            model.mid.scale = 0.0 if i == BAD else 1.0

        found: list[dict[str, Any]] = []
        if tool:
            with session({"model": compiled, "opt": opt}) as s:
                watch(compiled, rerun_forward=True)
                s.comm.action("set_stride", {"stride": 1})
                train(compiled, opt, 5, batches(), before)
                s.end_cell()
                found = causes(s)
                assert not s.ext.errors
        else:
            train(compiled, opt, 5, batches(), before)
        return sum(counters["graph_break"].values()), found

    breaks, found = run(True)
    assert breaks == run(False)[0]
    assert [(a["cause"], a["layer"], a["step"]) for a in found] == [("forward", "model.mid", BAD)]


# --- R47: what backward() was called on; R48: a skip that names what it left -----------


def test_r47_a_model_first_seen_at_its_bad_step_is_said_unchecked_then_diagnosed() -> None:
    """A model made and trained in one cell is hooked at its first step, after that
    step's forward: its batch was not kept. The alert says what was not checked (never
    "the loss is finite"), the replay says why it has nothing, and the next non-finite
    step is diagnosed in full."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = batches(bad_at=(0, 0))
    with session({"model": model, "opt": opt}) as s:  # no cell-start scan: first seen
        s.comm.action("skip_nonfinite", {"on": True})
        x = data(1).clone()
        x[0, 0] = float("nan")
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        s.end_cell()
        (first,) = causes(s)
        assert first["cause"] == "unchecked" and first["step"] == 1, first
        assert "first seen at this step" in first["message"]
        assert "were not checked" in first["message"] and "is finite" not in first["message"]
        assert "learning rate" not in first["remedy"] and "watch(model" in first["remedy"]
        reply = s.comm.action("replay_step")
        assert reply["code"] == "refused" and "step 1 of opt came before" in reply["message"]
        opt.zero_grad()
        model(x).pow(2).mean().backward()  # the same bad batch: kept this time
        opt.step()
        s.end_cell()
        second = causes(s)[-1]
        assert second["cause"] == "input" and second["step"] == 2, second
        assert s.status()["replayable"] == {"track": "opt", "step": 2}
        kinds = [a["kind"] for a in s.comm.alerts()]
        assert "non_finite" not in kinds, kinds  # step 1's flush-time alarm is covered
        assert not s.ext.errors


def test_r47_a_cell_start_keeps_the_first_steps_batch() -> None:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = batches()(1).clone()
    x[2, 1] = float("inf")
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)  # a cell starts: models hooked
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        s.end_cell()
        (a,) = causes(s)
        assert a["cause"] == "input" and a["step"] == 1 and "[2, 1]" in a["message"], a


def test_r47_a_gradient_penalty_by_autograd_grad_is_not_taken_for_the_loss() -> None:
    """``torch.autograd.grad`` (a penalty, the replay's own) is not a backward() root."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(16, 4, requires_grad=True)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        for _ in range(2):
            out = model(x)
            (gx,) = torch.autograd.grad(out.sum(), x, create_graph=True)
            loss = out.pow(2).mean() + gx.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            keeper = s.monitor.guard.keeper
            assert keeper is not None and keeper.root is not None
            assert keeper.root.node == "AddBackward0" and keeper.root.kind == "expression"
            assert torch.equal(keeper.root.values[0], loss.detach())
            opt.step()
        assert not s.ext.errors


def test_r24_the_backward_root_keeps_no_graph_model_or_batch_and_is_inert_after_unload() -> None:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(16, 4)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        for _ in range(3):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
        keeper = s.monitor.guard.keeper
        assert keeper is not None and keeper.root is not None
        assert keeper.root.values[0].grad_fn is None  # a detached view: no graph
        out = model(x)  # a graph armed while loaded, backward after unload
        refs = [weakref.ref(loss), weakref.ref(model(x))]
        del loss
        s.shell.user_ns.clear()
    out.pow(2).mean().backward()  # the armed node's hook does nothing now
    assert keeper.root is None
    gc.collect()
    assert [r() for r in refs] == [None, None]
    ref = weakref.ref(model)
    del model, opt, out
    gc.collect()
    assert ref() is None


def test_the_backward_root_costs_a_few_microseconds_per_step() -> None:
    """The keeper's hooks with the backward-root watch, against the same hooks with the
    watch off, interleaved (this thread's CPU time: a shared machine's other load does
    not count)."""
    import time

    from jupyterlab_torchdbg.kernel.grads.inputs import InputKeeper

    model = nn.Linear(4, 4)
    x = torch.randn(8, 4)
    n = 1000

    def per_step() -> float:
        t0 = time.thread_time()
        for _ in range(n):
            model(x).sum().backward()
        return (time.thread_time() - t0) / n

    keeper = InputKeeper(lambda where: None)
    keeper.sync([("model", model)], [])
    off, on = [], []
    for _ in range(4):
        keeper.backward.closed = True
        off.append(per_step())
        keeper.backward.closed = False
        on.append(per_step())
    root = keeper.root
    keeper.clear()
    assert root is not None and root.node == "SumBackward0"
    assert min(on) - min(off) < 60e-6, (off, on)  # ~10-20 µs here; generous for a busy CI


def test_r47_an_overflow_at_the_first_step_gives_no_learning_rate_advice() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8, bias=False), nn.Linear(8, 1, bias=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        opt.zero_grad()
        (model(torch.randn(16, 4)).mean() * 1e20).backward()  # finite grads, norm > fp32
        opt.step()
        s.end_cell()
        (a,) = causes(s)
        assert a["cause"] == "overflow" and a["step"] == 1, a
        assert "saw no update of this optimizer applied" in a["message"]
        assert "learning rate" not in a["remedy"] and "clip" in a["remedy"], a["remedy"]


def test_r48_a_skip_that_began_after_the_forward_names_the_statistics_it_left() -> None:
    """Skipping turned on between the forward and the step: no copy from before the
    batch exists, so the alert names the running statistics it could not put back."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        for i in range(1, 4):
            x = torch.randn(16, 4)
            if i == 3:
                x[0, 0] = float("nan")
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            if i == 3:
                s.comm.action("skip_nonfinite", {"on": True})
            opt.step()
        s.end_cell()
        (a,) = causes(s)
        assert a["cause"] == "input" and "The optimizer step was skipped" in a["message"]
        assert "Not restored (no copy from before this batch's forward): " in a["message"]
        assert "model.1.running_mean" in a["message"], a["message"]
        assert "put back" not in a["message"]
        # from now on the copy exists: the next NaN batch leaves no trace
        model[1].reset_running_stats()
        before = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
        x = torch.randn(16, 4)
        x[1, 1] = float("nan")
        for _ in range(1):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        for k, v in before.items():
            assert torch.equal(model.state_dict()[k], v), k
        assert not s.ext.errors


def test_r47_no_update_before_a_step_is_read_from_the_optimizers_state() -> None:
    """ "No update was applied before this step" is said from the optimizer's own state
    when it can tell, and as what the tool saw when it cannot (plain SGD keeps none)."""
    from jupyterlab_torchdbg.kernel.grads.skip_facts import updates_before

    def stepped(opt: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        return opt

    for make, fresh in [
        (lambda ps: torch.optim.Adam(ps), "none"),
        (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), "none"),
        (lambda ps: torch.optim.Adagrad(ps), "none"),  # state made at init, step 0
        (lambda ps: torch.optim.SGD(ps, lr=0.1), "none_seen"),  # keeps no state
    ]:
        model = nn.Linear(4, 2)
        opt = make(model.parameters())
        assert updates_before(opt, 0) == fresh, opt
        stepped(opt, model)
        # stepped before the tool saw it (loaded mid-run): its state says so
        assert updates_before(opt, 0) == (None if fresh == "none" else "none_seen"), opt
        assert updates_before(opt, 3) is None  # the tool saw updates


def test_r47_remedies_never_advise_the_skip_or_clip_the_user_already_has() -> None:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        s.comm.action("skip_nonfinite", {"on": True})
        train(model, opt, 4, batches(bad_at=(1, 1)))
        s.end_cell()
        (a,) = causes(s)
        assert a["cause"] == "input" and "skip_nonfinite" not in a["remedy"], a["remedy"]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8, bias=False), nn.Linear(8, 1, bias=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        s.comm.action("clip", {"max_norm": 1.0})
        for scale in (1.0, 1e20):  # a finite step, then finite gradients whose norm overflows
            opt.zero_grad()
            (model(torch.randn(16, 4)).mean() * scale).backward()
            opt.step()
        s.end_cell()
        (a,) = causes(s)
        assert a["cause"] == "overflow" and "clip_grad_norm_" not in a["remedy"], a["remedy"]
        assert "skip_nonfinite" in a["remedy"] or "clip by value" in a["remedy"]


def test_r47_a_loop_that_clips_by_itself_is_not_advised_to_clip() -> None:
    # issue #22: the loop's own clip_grad_norm_ counts as clipping for the NaN-cause
    # remedies too (weights made NaN by code; a NaN made by backward), not only the
    # panel's clip action. (An overflowing norm never reaches the optimizer there: the
    # loop's clip scales such gradients to zero.)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8, bias=False), nn.Linear(8, 1, bias=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        s.comm.action("set_stride", {"stride": 1})
        for i in range(1, 6):
            if i == BAD:
                with torch.no_grad():
                    model[0].weight[0, 0] = float("inf")  # code that set them
            opt.zero_grad()
            model(torch.randn(16, 4)).pow(2).mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        s.end_cell()
        (a,) = causes(s)
        assert a["cause"] == "weights", a
        assert "clip gradients" not in a["remedy"].lower(), a["remedy"]
        assert "clipped by norm" in a["remedy"]
    torch.manual_seed(0)
    model = Net(SqrtAt())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with session({"model": model, "opt": opt}) as s:
        watch(model, rerun_forward=True)
        s.shell.events.trigger("pre_run_cell", None)
        s.comm.action("set_stride", {"stride": 1})
        for i in range(1, 6):
            model.mid.c = 0.0 if i == BAD else 1.0
            opt.zero_grad()
            model(batches()(i)).pow(2).mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        s.end_cell()
        (a,) = causes(s)
        assert a["cause"] == "backward", a
        assert "clip gradients" not in a["remedy"].lower(), a["remedy"]


def test_r47_an_expression_loss_whose_module_term_is_finite_names_no_module() -> None:
    """``loss = criterion(out, y) + extra``, the +Inf in ``extra``: the loss is named
    non-finite, its module term is said finite (checked), and no module is blamed."""
    torch.manual_seed(0)
    model = Net()
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data, y = batches(), torch.randint(0, 3, (16,))
    with session({"model": model, "opt": opt, "criterion": criterion}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        for i in range(1, 5):
            out = model(data(i))
            keep = torch.ones(16)
            if i == BAD:
                keep[2] = 0.0
            p = out.softmax(-1).gather(1, y[:, None]).squeeze(1) * keep
            loss = criterion(out, y) - torch.log(p).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        s.end_cell()
        (a,) = causes(s)
        assert a["cause"] == "loss" and a["layer"] is None and a["step"] == BAD, a
        assert "(an expression of criterion(...)) is +Inf" in a["message"], a["message"]
        assert "its term criterion(...) is finite" in a["message"]
