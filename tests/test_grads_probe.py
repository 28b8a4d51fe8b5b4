"""The forward probe's fallback: when a step could not be checked before the optimizer ran
(CUDA without skip_nonfinite; here forced on CPU with ``guard.check_on_cpu = False``), the
flush-time non-finite alarm arms the probe for the next forward pass, checked module by
module to say where the NaN/Inf starts (in-process, the production hooks and alerts). The
at-step diagnosis is tested in test_grads_nan_cause.py."""

from __future__ import annotations

import copy
import gc
import weakref

import torch
import torch.nn as nn
from grads_support import session

from jupyterlab_torchdbg import log


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class SqrtAtZero(nn.Module):
    """Finite forward (sqrt(0) = 0); backward: sqrt'(0) * 0 = inf * 0 = NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.sqrt(x * 0.0)


def hooks_left(model: nn.Module, kept: int = 0) -> int:
    """Hooks on ``model``'s modules beyond the ``kept`` ones of the input keeper (its
    pre-hook and one forward hook on the root while loaded, inputs.py)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()) - kept


def step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    log(loss=loss)
    loss.backward()
    opt.step()


def probe_alerts(s: object) -> list[dict]:
    return [a for a in s.comm.alerts() if a["kind"] == "non_finite_forward"]  # type: ignore[attr-defined]


def nan_then_rerun(middle: nn.Module, x: torch.Tensor, restore: bool) -> dict:
    """``model = Linear -> middle -> Linear``: one step goes non-finite (the alarm arms the
    probe at the cell's end); then, with the weights restored from before that step (as a
    user reloading a checkpoint) or not, one more step runs. Returns the probe's alert."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), middle, nn.Linear(8, 1))
    saved = copy.deepcopy(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        s.monitor.guard.check_on_cpu = False  # as on CUDA without skip_nonfinite
        s.comm.action("set_stride", {"stride": 1})
        step(model, opt, x)
        s.end_cell()
        assert [a["kind"] for a in s.comm.alerts()] == ["non_finite"]
        assert hooks_left(model, kept=2) > 0  # armed for the next forward pass
        if restore:
            model.load_state_dict(saved)
        step(model, opt, x)
        s.end_cell()
        found = probe_alerts(s)
        assert len(found) == 1, s.comm.alerts()
        assert found[0]["step"] == 2
        assert "weights may already be updated" in found[0]["message"]
        assert hooks_left(model, kept=2) == 0  # one forward pass, then the probe is gone
        assert not s.ext.errors
        return found[0]


def test_probe_names_the_module_that_turns_finite_inputs_into_nan() -> None:
    # log of negative values: NaN loss, NaN grads (then NaN weights, restored here)
    a = nan_then_rerun(Log(), torch.randn(16, 4), restore=True)
    assert a["layer"] == "model.1" and a["severity"] == "error"
    assert "turns finite inputs into NaN/Inf" in a["message"] and "log" in a["remedy"]


def test_probe_says_when_the_weights_are_already_non_finite() -> None:
    # not restored: the NaN gradient has been applied, model.0's weights are NaN
    a = nan_then_rerun(Log(), torch.randn(16, 4), restore=False)
    assert a["layer"] == "model.0" and "own parameters are NaN/Inf" in a["message"]
    assert "checkpoint" in a["remedy"]


def test_probe_finds_a_finite_forward_pass_when_backward_makes_the_nan() -> None:
    """sqrt(0 * h) is finite forward; its gradient is inf * 0 = NaN in backward."""
    a = nan_then_rerun(SqrtAtZero(), torch.randn(16, 4), restore=True)
    assert a["layer"] is None and a["severity"] == "warning"
    assert "every module output was finite" in a["message"] and "backward" in a["remedy"]
    assert "largest output" in a["message"]


def test_probe_names_a_non_finite_input_batch() -> None:
    x = torch.randn(16, 4)
    x[3, 2] = float("nan")
    a = nan_then_rerun(nn.ReLU(inplace=True), x, restore=True)  # R27: in-place activation
    assert a["layer"] == "model" and "input batch" in a["message"]
    assert "isfinite" in a["remedy"]


def test_r01_r24_unload_removes_an_armed_probe_and_keeps_no_model_alive() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), Log(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        s.monitor.guard.check_on_cpu = False
        s.comm.action("set_stride", {"stride": 1})
        step(model, opt, torch.randn(16, 4))
        s.end_cell()
        assert hooks_left(model, kept=2) > 0
        s.shell.user_ns.clear()
    assert hooks_left(model) == 0  # unload removed the armed probe's hooks
    ref = weakref.ref(model)
    del model, opt
    gc.collect()
    assert ref() is None


def test_r29_script_modules_are_not_probed() -> None:
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
    model = torch.jit.script(inner)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 4)
    x[0, 0] = float("inf")
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        for _ in range(2):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            s.end_cell()
        assert [a["kind"] for a in s.comm.alerts()] == ["non_finite"]
        assert not s.ext.errors


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 1)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.proj(feats)


class DividesThenCalls(nn.Module):
    """Its own division makes the Inf; the head gets it as a keyword argument."""

    def __init__(self) -> None:
        super().__init__()
        self.child = nn.Linear(4, 8)
        self.head = Head()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(feats=self.child(x) / 0.0)


def test_probe_checks_keyword_inputs_so_the_parent_is_named_not_its_callee() -> None:
    from jupyterlab_torchdbg.kernel.grads.probe import ForwardProbe

    torch.manual_seed(0)
    model = DividesThenCalls()
    probe = ForwardProbe("opt", 1, [("model", model)])
    model(torch.randn(3, 4))
    alert = probe.report(1)
    assert alert is not None and alert.layer == "model", alert
    assert hooks_left(model) == 0
