"""The loop's own clip (user_clip.py, grads/loop_clip.py; issue #22): seen at its call,
judged after it, never advised again; torch's helpers put back on unload (R01); a
failure of ours never raises into the user's clip (R11)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from grads_support import session
from torch.nn.utils import clip_grad

from jupyterlab_torchdbg.kernel.user_clip import CLIPS


def mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))


def data(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)) for _ in range(steps)
    ]


def test_a_loop_clipping_loosely_is_judged_after_its_clip_and_never_advised_to_clip() -> None:
    """torch.optim.SGD with the user's clip_grad_norm_ at 1e4 (a bound far above its
    norms): a learning-rate typo explodes the norm through it. The alarm says which norm
    it read and advises what the loop does not do."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with session({"model": model, "opt": opt}) as s:
        for step, (x, y) in enumerate(data(60), 1):
            for g in opt.param_groups:
                g["lr"] = 0.05 if step <= 40 else 50.0
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e4)
            opt.step()
        s.end_cell()
        alerts = s.comm.alerts()
        assert not s.ext.errors, s.ext.errors
    first = [a for a in alerts if a["kind"] in ("explosion", "divergence")]
    assert first and first[0]["kind"] == "explosion", alerts
    a = first[0]
    assert "(after your clip_grad_norm_(max_norm=10000))" in a["message"], a["message"]
    assert "clip_grad_norm_(model.parameters()" not in a["remedy"], a["remedy"]
    assert "Your own clip let this norm through" in a["remedy"]
    non_finite = [a for a in alerts if a["kind"] == "non_finite"]
    assert all("Clipping is on" in a["remedy"] for a in non_finite)


def test_a_loop_without_torch_optim_clipping_by_value_is_recognised() -> None:
    """clip_grad_value_ by hand: nothing runs after it, so the loop is read before it,
    and a one-batch spike (what the clip bounds) is no explosion there; the clip is known
    to its track."""
    model = mlp()
    with session({"model": model}) as s:
        s.ext.scan_models()  # the training cell's start
        for step, (x, y) in enumerate(data(80), 1):
            model.zero_grad()
            loss = F.mse_loss(model(x), y) * (1000.0 if step == 60 else 1.0)
            loss.backward()
            nn.utils.clip_grad_value_(model.parameters(), 0.01)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.1)
        s.end_cell()
        track = next(iter(s.monitor.tracks.values()))
        assert track.boundary == "end_of_backward"
        assert track.user_clip == ("clip_grad_value_", 0.01)
        assert s.comm.alerts() == [] and not s.ext.errors


def test_r01_unload_puts_torchs_clip_helpers_back_and_a_reload_wraps_once() -> None:
    original = clip_grad._clip_grads_with_norm_
    group = clip_grad._group_tensors_by_device_and_dtype
    model = mlp()
    for _ in range(2):
        with session({"model": model}):
            assert CLIPS.installed
            assert clip_grad._clip_grads_with_norm_.__wrapped__ is original  # type: ignore[attr-defined]
        assert clip_grad._clip_grads_with_norm_ is original
        assert clip_grad._group_tensors_by_device_and_dtype is group
        assert not CLIPS.installed and CLIPS.listener is None


def test_r11_a_failure_of_ours_never_raises_into_the_users_clip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    monkeypatch.setattr(
        "jupyterlab_torchdbg.kernel.grads.loop_clip.after_clip", lambda *a, **k: 1 / 0
    )
    with session({"model": model, "opt": opt}) as s:
        x, y = data(1)[0]
        F.mse_loss(model(x), y).backward()
        before = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
        total = nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        after = [p.grad for p in model.parameters()]
        assert float(total) > 1e-3
        scale = 1e-3 / (float(total) + 1e-6)
        for b, a in zip(before, after, strict=True):
            torch.testing.assert_close(a, b * scale)  # the user's clip did its work
        assert s.ext.errors["grads:user_clip"] >= 1
