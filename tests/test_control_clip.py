"""Clipping reuses the gradient monitor's read (one read of the grads serves both) and is
bit for bit ``clip_grad_norm_``; R32: gradients still scaled by GradScaler are not clipped.

In-process (the production extension against fake shell/comm): the step hooks, the clip
action and every message are the real code. The real-kernel, cell-running side of the
clip action is in test_control.py.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.optim.optimizer as optim_mod
from grads_support import session

from jupyterlab_torchdbg import watch


def batches(n: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(16, 6, generator=g) * 5, torch.randn(16, 2, generator=g)) for _ in range(n)
    ]


def reference(model: nn.Module, data: list, max_norm: float, lr: float = 0.1) -> nn.Module:
    """The same training with ``clip_grad_norm_`` written by hand."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in data:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
    return model


def train(model: nn.Module, opt: torch.optim.Optimizer, data: list) -> None:
    """The user's loop, unchanged: no clipping in it (the panel's clip action does it)."""
    for x, y in data:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def count_total_norm_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = torch.nn.utils.get_total_norm

    def counted(*a: object, **k: object) -> torch.Tensor:
        calls[0] += 1
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.nn.utils, "get_total_norm", counted)
    return calls


def test_clip_reuses_the_monitor_read_and_equals_clip_grad_norm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
    twin = reference(copy.deepcopy(model), batches(30), 0.5)
    calls = count_total_norm_calls(monkeypatch)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        # a long stride: sampling alone would read the grads once in 50 steps
        s.comm.action("set_stride", {"stride": 50})
        ack = s.comm.action("clip", {"max_norm": 0.5})
        assert ack["method"] == "ack", ack
        train(model, opt, batches(30))
        s.end_cell()
        control = s.ext.control
        # every clipped step took its total from the monitor's read: no second read
        assert control.clipper.reused == 30 and calls[0] == 0
        track = s.track()
        assert track["sampled"] == 30  # clipping made the monitor read every step
        assert track["stride"] == 1 and track["every_step"] == "clip"  # and says so
        # the charts got every step's norm (before clipping)
        assert len(s.comm.series()["grad/opt/total"][0]) == 30
        assert not s.ext.errors
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)  # bit for bit what clip_grad_norm_ gives


def test_clip_outside_the_watched_scope_reads_the_grads_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The monitor watches half the model; clipping covers the whole optimizer."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
    twin = reference(copy.deepcopy(model), batches(10), 0.3)
    calls = count_total_norm_calls(monkeypatch)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        handle = watch(model[2], opt, stride=1)
        s.comm.action("clip", {"max_norm": 0.3})
        train(model, opt, batches(10))
        handle.remove()
        control = s.ext.control
        assert control.clipper.reused == 0 and calls[0] == 10
        assert not s.ext.errors
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def test_clip_of_a_subset_with_missing_grads_is_exact() -> None:
    """Frozen-this-step parameters (grad None) are left out exactly as clip_grad_norm_ does."""
    torch.manual_seed(2)
    model = nn.ModuleDict({"a": nn.Linear(6, 2), "b": nn.Linear(6, 2), "c": nn.Linear(6, 2)})
    twin = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    topt = torch.optim.SGD(twin.parameters(), lr=0.1)
    data = batches(8)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("clip", {"max_norm": 0.2})
        for x, y in data:
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model["a"](x) + model["c"](x), y).backward()  # b unused
            opt.step()
        assert s.ext.control.clipper.reused == 8
        assert not s.ext.errors
    for x, y in data:
        topt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(twin["a"](x) + twin["c"](x), y).backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.2)
        topt.step()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def test_r32_clip_refused_while_gradients_are_still_scaled() -> None:
    """optimizer.step() called directly while a GradScaler scales the loss: not clipped."""
    torch.manual_seed(3)
    model = nn.Linear(6, 2)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with session({"model": model, "opt": opt, "scaler": scaler}) as s:
        s.comm.action("clip", {"max_norm": 0.1})
        x, y = batches(1)[0]
        opt.zero_grad()
        scaler.scale(nn.functional.mse_loss(model(x), y)).backward()
        scaled = [p.grad.clone() for p in model.parameters()]
        opt.step()  # the bug being guarded against: bypassing scaler.step
        control = s.ext.control
        assert control.last_refusal is not None and "GradScaler" in control.last_refusal
        for p, g in zip(model.parameters(), scaled, strict=True):
            assert torch.equal(p.grad, g)  # untouched
        states = s.comm.messages("control")
        assert states[-1]["last_refusal"] == control.last_refusal

        # through scaler.step the hook sees unscaled grads: clipped exactly
        control.last_refusal = None
        opt.zero_grad()
        scaler.scale(nn.functional.mse_loss(model(x), y)).backward()
        expect = [p.grad.detach().clone() / 1024.0 for p in model.parameters()]
        ps = [nn.Parameter(torch.zeros_like(g)) for g in expect]
        for p, g in zip(ps, expect, strict=True):
            p.grad = g.clone()
        torch.nn.utils.clip_grad_norm_(ps, 0.1)
        scaler.step(opt)
        scaler.update()
        assert control.last_refusal is None
        for p, ref in zip(model.parameters(), ps, strict=True):
            torch.testing.assert_close(p.grad, ref.grad)
        assert not s.ext.errors


def test_device_path_guards_on_the_device_exact_and_reports_refusals_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The accelerator path (no host read of the norm, R26), run on the CPU: finite steps
    are bit for bit clip_grad_norm_, a NaN step leaves the grads as they are, and its
    refusal is reported once the flag reaches the host (here at the next step)."""
    from jupyterlab_torchdbg.kernel.control import clip as control_mod

    monkeypatch.setattr(control_mod, "HOST_CHECKED", frozenset())
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
    twin = reference(copy.deepcopy(model), batches(12), 0.5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("clip", {"max_norm": 0.5})
        train(model, opt, batches(12))
        control = s.ext.control
        assert control.last_refusal is None and control.clipper.reused == 12
        for a, b in zip(model.parameters(), twin.parameters(), strict=True):
            assert torch.equal(a, b)
        # a NaN step: not clipped (the grads stay what backward made them)
        x, y = batches(1)[0]
        x[0, 0] = float("nan")
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        before = [p.grad.clone() for p in model.parameters()]
        seen: list = []
        h = optim_mod.register_optimizer_step_pre_hook(
            lambda o, a, k: seen.append([p.grad.clone() for p in model.parameters()])
        )  # registered after ours: sees the grads as clipping left them
        try:
            opt.step()
        finally:
            h.remove()
        for g0, g1 in zip(before, seen[0], strict=True):
            assert torch.equal(g0.isnan(), g1.isnan())
            assert torch.equal(torch.nan_to_num(g0), torch.nan_to_num(g1))
        s.end_cell()  # the cell's end collects the flags still in flight
        assert control.last_refusal is not None
        assert control.last_refusal.startswith("step 13: total gradient norm is nan")
        assert s.comm.messages("control")[-1]["last_refusal"] == control.last_refusal
        assert not s.ext.errors
