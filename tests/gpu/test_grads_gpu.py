"""The gradient monitor on CUDA: no host sync per step (R26), norms equal torch's.

Skipped without a CUDA device. Errors inside the tool's hook are caught and counted (R11),
so "no sync" is checked both ways: nothing raises under
``torch.cuda.set_sync_debug_mode("error")`` *and* the tool counted no error of its own.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _session(ns: dict):  # imported lazily: the module must collect on machines without CUDA
    from grads_support import session

    return session(ns)


def make(dtype: torch.dtype = torch.float32) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 8)
    ).to("cuda", dtype)
    # plain SGD: no optimizer state, so the baseline step itself is sync-free
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    return model, opt


def step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    model(x).float().pow(2).mean().backward()
    opt.step()


def steps_without_sync(
    model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, n: int
) -> None:
    """``n`` steps under ``set_sync_debug_mode("error")``: any host-device sync raises."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(n):
            step(model, opt, x)
    finally:
        torch.cuda.set_sync_debug_mode(0)


def test_r26_baseline_step_is_sync_free() -> None:
    """Guards the test below: without the tool these steps raise nothing either."""
    model, opt = make()
    x = torch.randn(32, 64, device="cuda")
    step(model, opt, x)
    steps_without_sync(model, opt, x, 5)


def test_r26_monitored_steps_add_no_sync() -> None:
    model, opt = make()
    x = torch.randn(32, 64, device="cuda")
    with _session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        s.ext.stream.interval_s = 0.0  # flush at every step: the copies must not sync either
        step(model, opt, x)  # first sample builds the plan
        steps_without_sync(model, opt, x, 50)
        assert s.ext.errors == {}, dict(s.ext.errors)
        s.end_cell()  # waits for the last copies (a sync at the cell's end is fine)
        xs, total = s.comm.series()["grad/opt/total"]
        assert xs.tolist() == list(range(1, 52))
        assert all(math.isfinite(v) for v in total)


def test_norms_match_on_cuda_including_low_precision() -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        model, opt = make(dtype)
        x = torch.randn(32, 64, device="cuda", dtype=dtype)
        refs: list[float] = []
        layer_refs: list[float] = []
        with _session({"model": model, "opt": opt}) as s:
            s.comm.action("set_stride", {"stride": 1})
            for _ in range(10):
                opt.zero_grad(set_to_none=True)
                model(x).float().pow(2).mean().backward()
                grads = [p.grad.float() for p in model.parameters()]
                refs.append(float(torch.nn.utils.get_total_norm(grads)))
                layer_refs.append(
                    float(torch.linalg.vector_norm(torch.cat([grads[0].flatten(), grads[1]])))
                )
                opt.step()
            s.end_cell()
            series = s.comm.series()
            got = series["grad/opt/total"][1].tolist()
            assert got == pytest.approx(refs, rel=1e-3 if dtype != torch.float32 else 1e-5), dtype
            first = series["grad/opt/model.0"][1].tolist()
            assert first == pytest.approx(layer_refs, rel=1e-3 if dtype != torch.float32 else 1e-5)
            assert s.ext.errors == {}


def test_r31_amp_on_cuda_unscaled_and_skip_counted() -> None:
    model, opt = make()
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(32, 64, device="cuda")
    refs: list[float] = []
    with _session({"model": model, "opt": opt, "scaler": scaler}) as s:
        s.comm.action("set_stride", {"stride": 1})
        for i in range(20):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).float().pow(2).mean()
            if i == 7:
                loss = loss * math.inf
            scaler.scale(loss).backward()
            scale = scaler.get_scale()
            if i != 7:
                refs.append(
                    float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]))
                    / scale
                )
            scaler.step(opt)
            scaler.update()
        s.end_cell()
        track = s.track()
        assert track["skipped_steps"] == 1 and track["step"] == 19
        assert s.comm.alerts() == []
        got = s.comm.series()["grad/opt/total"][1].tolist()
        assert got == pytest.approx(refs, rel=1e-3)


def test_r31_r26_fused_adam_under_gradscaler_unscaled_unalarmed_and_sync_free() -> None:
    """A fused optimizer gets GradScaler's scale and found_inf in its kernel: the hooks
    see scaled gradients (the norms are divided on the device) and the skipped step too
    (told by found_inf, copied without a sync, never alarmed); no sync is added."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(32, 64, device="cuda")

    def amp_step(poison: bool = False) -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        if poison:
            loss = loss * math.inf
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    amp_step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        amp_step()  # the baseline: without the tool, sync-free
    finally:
        torch.cuda.set_sync_debug_mode(0)
    refs: list[float] = []
    with _session({"model": model, "opt": opt, "scaler": scaler}) as s:
        s.comm.action("set_stride", {"stride": 1})
        s.ext.stream.interval_s = 0.0
        for _ in range(6):  # the plan is built; the references read the grads (syncs)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).float().pow(2).mean()
            scaler.scale(loss).backward()
            grads = [p.grad for p in model.parameters()]
            refs.append(float(torch.nn.utils.get_total_norm(grads)) / scaler.get_scale())
            scaler.step(opt)
            scaler.update()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for i in range(30):
                amp_step(poison=i == 10)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert s.ext.errors == {}, dict(s.ext.errors)
        s.end_cell()
        assert s.comm.alerts() == [], s.comm.alerts()
        track = s.track()
        assert track["skipped_steps"] == 1 and track["skipped_nonfinite"] == 0
        xs, total = s.comm.series()["grad/opt/total"]
        assert xs.tolist() == list(range(1, 37))
        assert total[:6].tolist() == pytest.approx(refs, rel=1e-3)
        assert not math.isfinite(total[16])  # the step GradScaler's kernel skipped


def test_r26_clip_action_adds_no_sync_and_equals_clip_grad_norm() -> None:
    """The clip action on CUDA: the norm's finiteness is never asked of the host per step
    (a device-side guard; the flag comes back later), and the result is clip_grad_norm_'s."""
    import copy

    model, opt = make()
    twin = copy.deepcopy(model)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=1e-3)
    x = torch.randn(32, 64, device="cuda") * 100  # large grads: clipping acts every step
    with _session({"model": model, "opt": opt}) as s:
        s.comm.action("clip", {"max_norm": 0.1})
        step(model, opt, x)  # first sample builds the plan
        steps_without_sync(model, opt, x, 20)
        assert s.ext.errors == {}, dict(s.ext.errors)
        control = s.ext.control  # type: ignore[attr-defined]
        assert control.reused == 21  # the monitor's read served the clip every step
        s.end_cell()
        assert control.last_refusal is None
    for _ in range(21):
        twin_opt.zero_grad(set_to_none=True)
        twin(x).float().pow(2).mean().backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.1)
        twin_opt.step()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def test_forward_probe_on_cuda_names_the_module() -> None:
    """After a non-finite alarm the probe (which may sync: one forward pass) works on CUDA."""

    class Log(nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return torch.log(t)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), Log(), nn.Linear(8, 1)).cuda()
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 4, device="cuda")
    with _session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        step(model, opt, x)
        s.end_cell()
        model.load_state_dict(saved)
        step(model, opt, x)
        s.end_cell()
        probe = [a for a in s.comm.alerts() if a["kind"] == "non_finite_forward"]
        assert len(probe) == 1 and probe[0]["layer"] == "model.1", s.comm.alerts()
        assert s.ext.errors == {}, dict(s.ext.errors)


def test_skip_nonfinite_on_cuda_names_the_input_and_keeps_weights_finite() -> None:
    """With skip on, every step's total is read on the host (the one sync per step the
    option documents): a NaN batch is named at its step and that step is skipped."""
    model, opt = make()
    crit = nn.MSELoss()
    with _session({"model": model, "opt": opt, "crit": crit}) as s:
        s.comm.action("skip_nonfinite", {"on": True})
        for i in range(1, 11):
            x = torch.randn(32, 64, device="cuda")
            if i == 6:
                x[3, 7] = float("nan")
            opt.zero_grad(set_to_none=True)
            crit(model(x).float(), torch.zeros(32, 8, device="cuda")).backward()
            before = [p.detach().clone() for p in model.parameters()]
            opt.step()
            if i == 6:
                after = list(model.parameters())
                assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        s.end_cell()
        cause = [a for a in s.comm.alerts() if a["kind"] == "non_finite_cause"]
        assert len(cause) == 1 and cause[0]["step"] == 6 and cause[0]["cause"] == "input"
        assert "[3, 7]" in cause[0]["message"]
        assert s.track()["skipped_nonfinite"] == 1
        assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
        assert s.ext.errors == {}, dict(s.ext.errors)
