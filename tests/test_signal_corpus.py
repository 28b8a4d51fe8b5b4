"""Gradient signals on realistic workloads (tests/corpus): the alarm that fits, at the step
of the jump (±1), naming the layer that carries the norm, with a remedy that fits; and
healthy runs of every family stay quiet.

Each run is real training through the real step hook (the in-process harness): the test
knows only what any user knows — its own gradients — and computes from them, at every
step, which layer carries the norm (squared norms per owning module), to compare with
what the alarm names. Alarms are evaluated at flush time; ``end_cell`` forces the last
check. The thresholds are the defaults: nothing here is tuned to one model. At the end: a
``torch.compile``d MLP (the alarm through the compiled wrapper) and a ``DataLoader`` with
worker processes yielding one NaN sample (named at its step, tensor and index).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus.models import (
    build_cnn,
    build_gpt,
    build_hf_style,
    build_lstm_lm,
    build_mlp,
    copy_task_batches,
    image_batches,
    regression_batches,
    token_batches,
    warmup_lr,
)
from grads_support import session

from jupyterlab_torchdbg import log


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Small models: one intra-op thread is faster and leaves the other core free."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def layer_squares(model: nn.Module) -> dict[str, float]:
    """Per layer (the module owning the parameter, as the monitor names it): the sum of
    squared gradient norms. Tied weights count once, as ``named_parameters`` lists them."""
    out: dict[str, float] = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        layer = "model." + name.rpartition(".")[0]
        out[layer] = out.get(layer, 0.0) + float(p.grad.double().pow(2).sum())
    return out


@dataclass
class Run:
    alerts: list[dict[str, Any]]
    track: dict[str, Any]
    errors: dict[str, int]
    #: step -> per-layer squared gradient norms (before any clipping), when recorded
    squares: dict[int, dict[str, float]] = field(default_factory=dict)


def train(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    batches: Iterator[Any],
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    steps: int,
    *,
    lr: Callable[[int], float] | None = None,
    clip: float | None = None,
    scaler: torch.amp.GradScaler | None = None,
    truth: bool = False,
    stride: int | None = None,
    actions: dict[str, Any] | None = None,
) -> Run:
    """The user's loop, as written in notebooks (``log(step, loss=...)`` included)."""
    ns: dict[str, Any] = {"model": model, "opt": opt}
    if scaler is not None:
        ns["scaler"] = scaler
    with session(ns) as s:
        if stride is not None:
            s.comm.action("set_stride", {"stride": stride})
        for name, args in (actions or {}).items():
            assert s.comm.action(name, args)["method"] == "ack"
        squares: dict[int, dict[str, float]] = {}
        for step in range(1, steps + 1):
            if lr is not None:
                for g in opt.param_groups:
                    g["lr"] = lr(step)
            batch = next(batches)
            opt.zero_grad(set_to_none=True)
            if scaler is not None:
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = loss_fn(model, batch)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss = loss_fn(model, batch)
                loss.backward()
                if truth:
                    squares[step] = layer_squares(model)
                if clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), clip)
                opt.step()
            log(step, loss=loss)
        s.end_cell()
        return Run(s.comm.alerts(), s.track(), dict(s.ext.errors), squares)


def carrier(squares: dict[str, float]) -> tuple[str, float]:
    layer = max(squares, key=lambda k: squares[k])
    return layer, squares[layer] / sum(squares.values())


def assert_one_alarm(run: Run, kind: str, step: int) -> dict[str, Any]:
    # a non-finite finding may follow a divergence that runs on into NaN: not the subject
    first = [a for a in run.alerts if not a["kind"].startswith("non_finite")]
    assert first, run.alerts
    a = first[0]
    assert a["kind"] == kind, run.alerts
    assert abs(a["step"] - step) <= 1, (a["step"], step, a["message"])
    assert not run.errors, run.errors
    return a


def assert_names_the_carrier(run: Run, alert: dict[str, Any]) -> None:
    layer, share = carrier(run.squares[alert["step"]])
    assert alert["layer"] == layer, (alert["message"], layer, share)
    m = re.search(r"carries (\d+)% of the norm", alert["message"])
    assert m is not None, alert["message"]
    assert abs(int(m.group(1)) - 100 * share) <= 1.0


def lm_loss(m: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return m(*b)[1]


def lstm_loss(m: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return m.loss(*b)  # type: ignore[operator]


def hf_loss(m: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
    return m(**b).loss


def ce_loss(m: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(m(b[0]), b[1])


def mse(reduction: str = "mean") -> Callable[[nn.Module, Any], torch.Tensor]:
    return lambda m, b: F.mse_loss(m(b[0]), b[1], reduction=reduction)


def bump(at: int, lo: float, hi: float) -> Callable[[int], float]:
    """The learning rate raised for the updates after step ``at`` (a config typo, a
    schedule bug): the gradient of step ``at + 2`` is the first one it blows up."""
    return lambda step: lo if step <= at else hi


# --- diverging runs: the alarm, its step, its layer, its remedy ----------------------------


def test_gpt_adamw_far_too_high_lr_diverges_at_step_2() -> None:
    model = build_gpt()
    opt = torch.optim.AdamW(model.parameters(), lr=10.0)
    run = train(model, opt, token_batches(seed=1), lm_loss, 20, truth=True)
    a = assert_one_alarm(run, "explosion", 2)
    assert_names_the_carrier(run, a)
    assert "the level of the first steps" in a["message"]
    assert "learning rate" in a["remedy"]
    # the loss jumped x400 too: one story, one alert (the loss is added to the explosion's
    # message when both are checked together)
    assert [x["kind"] for x in run.alerts].count("divergence") == 0


def test_lstm_lm_adam_far_too_high_lr_names_the_lstm_not_the_embedding() -> None:
    model = build_lstm_lm()
    opt = torch.optim.Adam(model.parameters(), lr=1.0)
    run = train(model, opt, token_batches(seed=2), lstm_loss, 20, truth=True)
    a = assert_one_alarm(run, "explosion", 2)
    assert_names_the_carrier(run, a)
    assert a["layer"] != "model.encoder"


def test_hf_style_lr_bump_after_a_healthy_start() -> None:
    model = build_hf_style()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    run = train(model, opt, copy_task_batches(), hf_loss, 70, lr=bump(60, 5e-4, 10.0), truth=True)
    a = assert_one_alarm(run, "explosion", 62)
    assert_names_the_carrier(run, a)
    assert "running median" in a["message"] and "clip_grad_norm_" in a["remedy"]


def test_cnn_with_batchnorm_lr_bump() -> None:
    model = build_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    run = train(model, opt, image_batches(), ce_loss, 70, lr=bump(60, 0.1, 100.0), truth=True)
    a = assert_one_alarm(run, "explosion", 62)
    assert_names_the_carrier(run, a)


def test_mlp_loss_scaled_up_mid_run() -> None:
    """A loss multiplied by 1e4 from step 50 on (a weighting bug): the gradients follow."""
    model = build_mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_fn(m: nn.Module, b: Any) -> torch.Tensor:
        loss_fn.calls += 1  # type: ignore[attr-defined]
        scale = 1e4 if loss_fn.calls >= 50 else 1.0  # type: ignore[attr-defined]
        return scale * F.mse_loss(m(b[0]), b[1])

    loss_fn.calls = 0  # type: ignore[attr-defined]
    run = train(model, opt, regression_batches(), loss_fn, 70, truth=True)
    a = assert_one_alarm(run, "explosion", 50)
    assert_names_the_carrier(run, a)


def test_lstm_lm_clipped_in_user_code_diverges_in_the_loss() -> None:
    """The user clips in their own loop: the norms at the step stay at the clip level, so
    the logged loss is where the divergence shows."""
    model = build_lstm_lm()
    opt = torch.optim.SGD(model.parameters(), lr=20.0)
    run = train(model, opt, token_batches(seed=2), lstm_loss, 80, lr=bump(60, 20.0, 1e4), clip=0.25)
    a = assert_one_alarm(run, "divergence", 62)
    assert "loss" in a["message"] and "learning rate" in a["remedy"]
    assert "clip" not in a["remedy"].lower()


def test_gpt_with_the_clip_action_on_gets_no_clipping_advice() -> None:
    model = build_gpt()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4)
    run = train(
        model,
        opt,
        token_batches(seed=1),
        lm_loss,
        90,
        lr=bump(80, 6e-4, 5.0),
        truth=True,
        actions={"clip": {"max_norm": 1.0}},
    )
    a = assert_one_alarm(run, "explosion", 82)
    assert_names_the_carrier(run, a)  # the norm before clipping, as the user computed it
    assert "Clipping is on" in a["remedy"] and "clip_grad_norm_" not in a["remedy"]
    assert "before clipping" in a["message"]


# --- healthy runs: no alarm -----------------------------------------------------------------


def quiet(run: Run, steps: int) -> None:
    assert run.alerts == [], [a["message"] for a in run.alerts]
    assert not run.errors, run.errors
    assert run.track["step"] == steps


def test_healthy_gpt_adamw_with_linear_warmup() -> None:
    model = build_gpt()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    lr = lambda step: warmup_lr(step - 1, 3e-3, 30, 300)  # noqa: E731
    quiet(train(model, opt, token_batches(seed=1), lm_loss, 300, lr=lr, stride=1), 300)


def test_healthy_hf_style_warmup_and_fine_tuning_with_frozen_layers() -> None:
    model = build_hf_style()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    lr = lambda step: warmup_lr(step - 1, 5e-4, 30, 150)  # noqa: E731
    quiet(train(model, opt, copy_task_batches(), hf_loss, 150, lr=lr, stride=1), 150)
    tuned = build_hf_style(seed=1)
    for name, p in tuned.named_parameters():
        p.requires_grad_(name.startswith(("lm_head", "norm", "layers.layers.1")))
    opt = torch.optim.AdamW([p for p in tuned.parameters() if p.requires_grad], lr=1e-3)
    quiet(train(tuned, opt, copy_task_batches(seed=3), hf_loss, 150, stride=1), 150)


def test_healthy_amp_scale_search() -> None:
    """GradScaler from 65536 down: the first steps overflow fp16 and are skipped (they
    never reach the hook); the run is healthy."""
    model = build_mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")

    def loss_fn(m: nn.Module, b: Any) -> torch.Tensor:
        return F.mse_loss(m(b[0]).float(), b[1], reduction="sum")

    run = train(model, opt, regression_batches(batch=256), loss_fn, 120, scaler=scaler, stride=1)
    assert scaler.get_scale() < 65536.0  # the search happened
    assert run.alerts == [] and not run.errors
    assert 100 <= run.track["step"] < 120  # skipped steps never reached the hook


def test_healthy_lstm_lm_with_clipping_in_user_code() -> None:
    model = build_lstm_lm()
    opt = torch.optim.SGD(model.parameters(), lr=20.0)
    quiet(train(model, opt, token_batches(seed=2), lstm_loss, 300, clip=0.25, stride=1), 300)


def test_healthy_cnn_with_batchnorm_and_a_noisy_two_image_batch() -> None:
    model = build_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    quiet(train(model, opt, image_batches(), ce_loss, 300, stride=1), 300)
    model = build_cnn(seed=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    quiet(train(model, opt, image_batches(batch=2, seed=1), ce_loss, 300, stride=1), 300)


def test_healthy_batch_1_regression_and_unnormalised_targets() -> None:
    model = build_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    quiet(train(model, opt, regression_batches(batch=1, seed=3), mse(), 300, stride=1), 300)
    # targets x1000 (mean) and a sum-reduced loss over 256: large, growing norms
    model = build_mlp(seed=1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    quiet(train(model, opt, regression_batches(scale=1e3), mse(), 300, stride=1), 300)
    model = build_mlp(seed=2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = regression_batches(scale=1e3, batch=256)
    quiet(train(model, opt, batches, mse("sum"), 300, stride=1), 300)


@torch.no_grad()
def test_the_corpus_loss_values_are_finite() -> None:
    """Guard for the builders themselves: one step of each family is finite."""
    torch.manual_seed(0)
    x, y = next(token_batches())
    assert math.isfinite(float(lm_loss(build_gpt(), (x, y))))
    assert math.isfinite(float(lstm_loss(build_lstm_lm(), (x, y))))
    assert math.isfinite(float(hf_loss(build_hf_style(), next(copy_task_batches()))))
    assert math.isfinite(float(ce_loss(build_cnn(), next(image_batches()))))


# --- a compiled model, and a DataLoader with worker processes ------------------------------


def test_compiled_mlp_lr_bump_is_alarmed_at_its_step() -> None:
    torch.manual_seed(0)
    eager = build_mlp()
    model = torch.compile(eager)
    opt = torch.optim.SGD(eager.parameters(), lr=0.01)
    batches = regression_batches()
    with session({"model": model, "opt": opt}) as s:
        for step in range(1, 61):
            for g in opt.param_groups:
                g["lr"] = 0.01 if step <= 40 else 50.0  # a typo in the schedule
            x, y = next(batches)
            opt.zero_grad(set_to_none=True)
            F.mse_loss(model(x), y).backward()
            opt.step()
        s.end_cell()
        alerts = s.comm.alerts()
        assert not s.ext.errors, s.ext.errors
    first = [a for a in alerts if not a["kind"].startswith("non_finite")]
    assert first and first[0]["kind"] == "explosion", alerts
    # the update after step 40 uses the new LR: step 42's gradient is the first it blows up
    assert abs(first[0]["step"] - 42) <= 1, first[0]
    assert first[0]["layer"].startswith("model."), first[0]
    assert "clip" in first[0]["remedy"].lower()


class Samples(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """64 samples; sample 37 holds a NaN at feature 2 (a corrupt row in the data)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        x = torch.randn(6, generator=g)
        if i == 37:
            x[2] = float("nan")
        return x, torch.randint(0, 3, (), generator=g)


def test_a_nan_sample_from_dataloader_workers_is_named_at_its_step() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    loader = torch.utils.data.DataLoader(Samples(), batch_size=8, num_workers=2)
    ns: dict[str, Any] = {"model": model, "opt": opt, "crit": crit}
    with session(ns) as s:
        for _epoch in range(2):
            for x, y in loader:  # batch 5 of each epoch holds sample 37 at row 5
                loss = crit(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        s.end_cell()
        alerts = s.comm.alerts()
        assert not s.ext.errors, s.ext.errors
    causes = [a for a in alerts if a["kind"] == "non_finite_cause"]
    assert causes, alerts
    first = causes[0]
    assert first["step"] == 5 and first["cause"] == "input", first
    assert "at index [5, 2]" in first["message"], first["message"]
    assert "learning rate" not in first["remedy"]


def test_word_lm_updated_by_hand_and_clipped_diverges_in_its_weights() -> None:
    """The word-language-model example's manual SGD, clipped in the loop at 0.25, at lr
    400. Judged after its own clip (issue #22), its gradient norm never moves (0.25 from
    step 2 on: the clip's bound); before the clip it climbed x26, x3, x5 per step, which
    is what the clip is there for. What diverges is the weights: the first two updates
    take their norm x2.2 (a healthy run: x1.1 over its first five). The alarm comes
    from the end-of-backward boundary, read at the loop's clip, names the LSTM and does
    not advise the clip the loop already has."""
    model = build_lstm_lm()
    batches = token_batches()
    with session({"model": model}) as s:
        s.ext.scan_models()  # what the start of the training cell does
        for _step in range(1, 21):
            x, y = next(batches)
            model.zero_grad()
            lstm_loss(model, (x, y)).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-400.0)
        s.end_cell()
        alerts = s.comm.alerts()
        track = s.track("model")
        assert track["boundary"] == "end_of_backward"
        assert not s.ext.errors, s.ext.errors
    first = [a for a in alerts if not a["kind"].startswith("non_finite")]
    assert first and first[0]["kind"] == "divergence", alerts
    assert first[0]["step"] == 2, first[0]
    assert first[0]["layer"] == "model.lstm", first[0]
    assert "weights' norm" in first[0]["message"]
    remedy = first[0]["remedy"]
    assert "clip_grad" not in remedy and not remedy.lower().startswith("clip"), remedy
    assert "explosion" not in [a["kind"] for a in alerts]
    # read after the loop's clip: every sampled norm is at most the clip's bound
    assert track["stats"]["max"][0] <= 0.25 * 1.001, track["stats"]
