"""GradScaler with every optimizer (R31) and skipping steps taken with a closure (R48).

A fused optimizer (``Adam(fused=True)``) is stepped by GradScaler with the gradients still
scaled and ``found_inf`` handed to its kernel, which skips the update itself: the hooks
see every step, GradScaler's skipped ones too. The norms must still be the unscaled ones,
and such a skip is GradScaler's, never a non-finite alarm claiming the step "is applied".
An optimizer stepped with a closure (LBFGS) makes its gradients inside ``step``: they
are checked after the closure ran, and a skipped step leaves the weights and the
optimizer's state exactly as they were. Finite gradients whose float32 norm overflows
are an explosion, not NaN/Inf: never skipped.
"""

from __future__ import annotations

import json
import math
import textwrap
from typing import Any

import numpy as np
import pytest
import torch
from grads_support import session
from kernel_client import KernelDriver, merge_series
from torch import nn

POISON = 7  # the step (0-based loop index) whose loss is multiplied by inf


def make_opt(kind: str, params: Any) -> torch.optim.Optimizer:
    if kind == "fused":
        return torch.optim.Adam(params, lr=1e-3, fused=True)
    if kind == "foreach":
        return torch.optim.Adam(params, lr=1e-3, foreach=True)
    return torch.optim.Adam(params, lr=1e-3, foreach=False)


def train_scaled(
    model: nn.Module, opt: torch.optim.Optimizer, scaler: Any, unscale_first: bool, steps: int
) -> tuple[list[float], list[list[torch.Tensor]]]:
    """The loop, with the unscaled total norm of each step computed by hand."""
    refs: list[float] = []
    weights: list[list[torch.Tensor]] = []
    g = torch.Generator().manual_seed(1)
    for i in range(steps):
        opt.zero_grad()
        x, y = torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g)
        loss = nn.functional.mse_loss(model(x), y)
        if i == POISON:
            loss = loss * math.inf  # GradScaler finds inf and skips this step
        scaler.scale(loss).backward()
        if unscale_first:
            scaler.unscale_(opt)
            ref = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
        else:
            ref = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            ref = ref / scaler.get_scale()
        refs.append(float(ref))
        weights.append([p.detach().clone() for p in model.parameters()])
        scaler.step(opt)
        scaler.update()
    weights.append([p.detach().clone() for p in model.parameters()])
    return refs, weights


@pytest.mark.parametrize("unscale_first", [False, True], ids=["step", "unscale_first"])
@pytest.mark.parametrize("kind", ["fused", "foreach", "plain"])
@pytest.mark.parametrize("skip", [False, True], ids=["", "skip_on"])
def test_r31_norms_are_unscaled_and_a_scaler_skip_is_never_alarmed(
    kind: str, unscale_first: bool, skip: bool
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = make_opt(kind, model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**15)
    with session({"model": model, "opt": opt, "scaler": scaler}) as s:
        s.comm.action("set_stride", {"stride": 1})
        if skip:
            s.comm.action("skip_nonfinite", {"on": True})
        refs, weights = train_scaled(model, opt, scaler, unscale_first, 14)
        s.end_cell()
        xs, total = s.comm.series()["grad/opt/total"]
        if kind == "fused":
            # every step reaches the hooks; GradScaler's skipped one shows its inf/NaN
            assert xs.tolist() == list(range(1, 15))
            assert not math.isfinite(total[POISON])
            got = np.delete(total, POISON)
        else:
            assert xs.tolist() == list(range(1, 14))  # the skipped step never reaches step()
            got = total
        expected = [r for i, r in enumerate(refs) if i != POISON]
        np.testing.assert_allclose(got, expected, rtol=1e-5)
        _, scales = s.comm.series()["grad/opt/amp_scale"]
        assert np.isfinite(scales).all()  # every step came through the scaler
        # GradScaler's own skip: counted from the scale, no alarm, no claim it applied
        assert s.comm.alerts() == [], s.comm.alerts()
        track = s.track()
        assert track["skipped_steps"] == 1 and track["skipped_nonfinite"] == 0
        assert not s.ext.errors
    for a, b in zip(weights[POISON], weights[POISON + 1], strict=True):
        assert torch.equal(a, b)  # GradScaler (the fused kernel) skipped it


@pytest.mark.parametrize("device_path", [False, True], ids=["host", "device_path"])
def test_r31_r32_clip_of_a_fused_optimizer_under_gradscaler_uses_the_unscaled_norm(
    device_path: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clipping scaled gradients by the factor of their unscaled norm: the fused kernel
    divides afterwards, so the update is the one of clip_grad_norm_ after unscale_. The
    step GradScaler skips is no clip refusal (on the accelerator path either, R26)."""
    from jupyterlab_torchdbg.kernel.control import clip as control_mod

    if device_path:
        monkeypatch.setattr(control_mod, "HOST_CHECKED", frozenset())
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
    twin = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
    twin.load_state_dict(model.state_dict())
    topt = make_opt("fused", twin.parameters())
    tscaler = torch.amp.GradScaler("cpu", init_scale=2.0**15)
    opt = make_opt("fused", model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**15)
    g = torch.Generator().manual_seed(2)
    data = [(torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g)) for _ in range(6)]
    data[3][0][0, 0] = math.inf  # GradScaler skips this step
    for x, y in data:
        topt.zero_grad()
        tscaler.scale(nn.functional.mse_loss(twin(x), y)).backward()
        tscaler.unscale_(topt)
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.05)
        tscaler.step(topt)
        tscaler.update()
    with session({"model": model, "opt": opt, "scaler": scaler}) as s:
        s.comm.action("clip", {"max_norm": 0.05})
        for x, y in data:
            opt.zero_grad()
            scaler.scale(nn.functional.mse_loss(model(x), y)).backward()
            scaler.step(opt)
            scaler.update()
        s.end_cell()
        s.ext.control.clipper.check_refusals(wait=True)
        assert s.ext.control.last_refusal is None
        assert s.comm.alerts() == [] and s.track()["skipped_steps"] == 1
        assert not s.ext.errors
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def state_of(opt: torch.optim.Optimizer, model: nn.Module) -> dict[str, Any]:
    """LBFGS's state (kept on its first parameter), copied as deep as it goes."""
    return {
        k: v.clone()
        if torch.is_tensor(v)
        else [t.clone() if torch.is_tensor(t) else t for t in v]
        if isinstance(v, list)
        else v
        for k, v in opt.state[model[0].weight].items()
    }


def lbfgs_run(
    nan_at: int, later: bool, skip: bool
) -> tuple[nn.Module, torch.optim.LBFGS, dict[str, Any], Any]:
    """LBFGS on 8 batches; batch ``nan_at`` holds a NaN (at the closure's first call, or,
    with ``later``, only at its second: after LBFGS moved the weights within the step)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)) for _ in range(8)]
    seen: dict[str, Any] = {}
    with session({"model": model, "opt": opt}) as s:
        if skip:
            s.comm.action("skip_nonfinite", {"on": True})
        for i, (x, y) in enumerate(data):
            calls = [0]

            def closure(x: torch.Tensor = x, y: torch.Tensor = y, i: int = i) -> torch.Tensor:
                calls[0] += 1
                if i == nan_at and calls[0] == (2 if later else 1):
                    x = x.clone()
                    x[2, 1] = math.nan
                opt.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                return loss

            if i == nan_at:
                seen["weights"] = [p.detach().clone() for p in model.parameters()]
                seen["state"] = state_of(opt, model)
            opt.step(closure)
            if i == nan_at:
                seen["after"] = [p.detach().clone() for p in model.parameters()]
                seen["state_after"] = state_of(opt, model)
        s.end_cell()
        seen["alerts"] = s.comm.alerts()
        seen["track"] = s.track()
        assert not s.ext.errors
    return model, opt, seen, None


def same_state(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if sorted(a) != sorted(b):
        return False
    for k, v in a.items():
        w = b[k]
        if torch.is_tensor(v):
            if not torch.equal(v, w):
                return False
        elif isinstance(v, list):
            if len(v) != len(w) or not all(
                p is q if p is None or q is None else torch.equal(p, q)
                for p, q in zip(v, w, strict=True)
            ):
                return False
        elif v != w:
            return False
    return True


@pytest.mark.parametrize("later", [False, True], ids=["first_call", "later_call"])
def test_r48_lbfgs_skip_leaves_weights_and_state_as_before_the_step(later: bool) -> None:
    model, _, seen, _ = lbfgs_run(4, later, skip=True)
    for a, b in zip(seen["weights"], seen["after"], strict=True):
        assert torch.equal(a, b)  # the skipped step changed no weight
    assert same_state(seen["state"], seen["state_after"])
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert seen["track"]["skipped_nonfinite"] == 1
    skipped = [a for a in seen["alerts"] if "skipped" in a["message"]]
    assert skipped and all(a["step"] == 5 for a in skipped)
    assert any("put back from a copy taken before the step" in a["message"] for a in skipped)


def test_r48_lbfgs_without_skip_is_read_after_its_closure() -> None:
    """The norms are the closure's gradients of this step, not the previous step's: the
    NaN batch's own step is the one alarmed (and, without skip, said to be applied)."""
    model, _, seen, _ = lbfgs_run(4, False, skip=False)
    causes = [a for a in seen["alerts"] if a["kind"] == "non_finite_cause"]
    assert [a["step"] for a in causes] == [5]
    assert causes[0]["cause"] == "input" and "it is applied now" in causes[0]["message"]
    assert not all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_r48_finite_gradients_whose_norm_overflows_are_not_skipped() -> None:
    """Gradient values of 1e20 are finite, their float32 sum of squares is not: an
    explosion, applied, and said to be; never skipped as NaN/Inf."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=1e-22)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("skip_nonfinite", {"on": True})
        s.comm.action("set_stride", {"stride": 1})
        for i in range(6):
            opt.zero_grad()
            model(torch.randn(3, 4)).sum().backward()
            if i == 3:
                model.weight.grad.fill_(1e20)  # finite values: a norm of 2.8e20
                before = model.weight.detach().clone()
            opt.step()
            if i == 3:
                torch.testing.assert_close(model.weight, before - 1e-22 * 1e20)
        s.end_cell()
        assert s.track()["skipped_nonfinite"] == 0
        (cause,) = [a for a in s.comm.alerts() if a["kind"] == "non_finite_cause"]
        assert cause["cause"] == "overflow" and cause["step"] == 4
        assert "finite" in cause["message"] and "norm overflows float32" in cause["message"]
        assert "it is applied now" in cause["message"]
        assert "skipped" not in cause["message"].replace("skip_nonfinite skips only", "")
        assert not any(a["kind"] == "non_finite_skipped" for a in s.comm.alerts())
        assert not s.ext.errors


async def test_r31_fused_adam_under_gradscaler_in_a_real_kernel(loaded: KernelDriver) -> None:
    """A real kernel, no code change: fused Adam's norms are GradScaler-unscaled, its
    inf step is GradScaler's skip (no alarm) while skipping is on too."""
    comm_id = await loaded.open_comm()
    r = await loaded.run(
        textwrap.dedent(
            """
            import json, math, torch, torch.nn as nn
            from jupyterlab_torchdbg import watch
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 3))
            opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
            scaler = torch.amp.GradScaler('cpu')
            h = watch(model, opt, stride=1, skip_nonfinite=True)
            ref = []
            for i in range(30):
                opt.zero_grad()
                loss = model(torch.randn(16, 10)).pow(2).mean()
                if i == 12:
                    loss = loss * math.inf
                scaler.scale(loss).backward()
                ref.append(float(torch.nn.utils.get_total_norm(
                    [p.grad for p in model.parameters()])) / scaler.get_scale())
                scaler.step(opt)
                scaler.update()
            print(json.dumps([x if math.isfinite(x) else None for x in ref]))
            """
        )
    )
    ref = json.loads(r.stdout)
    await loaded.drain(0.3)
    xs, total = merge_series(loaded.messages("series", comm_id))["grad/opt/total"]
    assert xs.tolist() == list(range(1, 31))
    assert ref[12] is None and not math.isfinite(total[12])
    np.testing.assert_allclose(np.delete(total, 12), [x for x in ref if x is not None], rtol=1e-5)
    assert not loaded.messages("alert", comm_id)
    track = loaded.messages("grads", comm_id)[-1].data["tracks"][0]
    assert track["skipped_steps"] == 1 and track["skipped_nonfinite"] == 0


async def test_r48_lbfgs_skip_in_a_real_kernel(loaded: KernelDriver) -> None:
    """A real kernel: LBFGS with skipping on, a NaN batch at one step; the weights and
    the optimizer's state after that step are those before it, and the alert says so."""
    comm_id = await loaded.open_comm()
    r = await loaded.run(
        textwrap.dedent(
            """
            import json, math, torch, torch.nn as nn
            from jupyterlab_torchdbg import watch
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
            opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
            h = watch(model, opt, skip_nonfinite=True)
            out = {}
            for i in range(8):
                g = torch.Generator().manual_seed(i)
                x, y = torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)
                if i == 4:
                    x[2, 1] = math.nan
                def closure():
                    opt.zero_grad()
                    loss = nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    return loss
                if i == 4:
                    before = [p.detach().clone() for p in model.parameters()]
                    evals = opt.state[model[0].weight]['func_evals']
                opt.step(closure)
                if i == 4:
                    out['same'] = all(torch.equal(a, b) for a, b in
                                      zip(before, model.parameters()))
                    out['evals'] = opt.state[model[0].weight]['func_evals'] - evals
            out['finite'] = all(bool(torch.isfinite(p).all()) for p in model.parameters())
            print(json.dumps(out))
            """
        )
    )
    out = json.loads(r.stdout)
    assert out == {"same": True, "evals": 0, "finite": True}
    await loaded.drain(0.3)
    alerts = [a for m in loaded.messages("alert", comm_id) for a in m.data["alerts"]]
    cause = [a for a in alerts if a["kind"] == "non_finite_cause"]
    assert [a["step"] for a in cause] == [5] and cause[0]["cause"] == "input"
    assert "put back from a copy taken before the step" in cause[0]["message"]
    track = loaded.messages("grads", comm_id)[-1].data["tracks"][0]
    assert track["skipped_nonfinite"] == 1


def test_r31_a_scaler_skip_read_only_at_the_alarm_check_is_not_alarmed() -> None:
    """The accelerator path, run on the CPU: no check at the step (no sync), so only the
    alarm check, from the copied found_inf, keeps GradScaler's skip from an alarm."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = make_opt("fused", model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**15)
    with session({"model": model, "opt": opt, "scaler": scaler}) as s:
        s.comm.action("set_stride", {"stride": 1})
        s.monitor.guard.check_on_cpu = False
        train_scaled(model, opt, scaler, False, 14)
        s.end_cell()
        assert s.comm.alerts() == [] and s.track()["skipped_steps"] == 1
        assert not s.ext.errors


def test_r31_amp_skip_flags_in_flight_are_read_at_the_check_in_order() -> None:
    """Flags copied without blocking (an accelerator's) are read only at the alarm check,
    up to the rows judged; each skipped step is told once."""
    from jupyterlab_torchdbg.kernel.grads.amp_skips import AmpSkips

    class Done:
        def __init__(self) -> None:
            self.waited = 0

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            self.waited += 1

    flags = AmpSkips()
    done = Done()
    for step, flag in ((3, 0.0), (4, 1.0), (5, 0.0), (9, 1.0)):
        flags._pending.append((step, torch.tensor(flag), done))
    assert flags.skipped(5) == {4}
    assert flags.skipped(5) == set()  # told once
    assert flags.skipped(12) == {9} and done.waited == 0
    flags.note(13, torch.tensor(1.0))  # a CPU flag: known at once
    assert flags.skipped(13) == {13}
