"""Alarms: explosion, non-finite (naming the layer), vanishing, AMP skips (R31), rate limits."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from grads_support import session

from jupyterlab_torchdbg import log
from jupyterlab_torchdbg.kernel.grads.alarms import REARM_SAMPLES, Detector, Thresholds
from jupyterlab_torchdbg.kernel.grads.alerts import AlertLog

# --- detector logic on hand-made rows ---------------------------------------------------


def rows(*values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_explosion_against_running_median_fires_once() -> None:
    d = Detector("opt", Thresholds())
    steady = [[1.0, 0.6, 0.8]] * 10
    assert d.evaluate(list(range(1, 11)), rows(*steady), ["a", "b"]) == []
    alerts = d.evaluate([11, 12], rows([50.0, 1.0, 50.0], [80.0, 1.0, 80.0]), ["a", "b"])
    assert [a.kind for a in alerts] == ["explosion"]
    a = alerts[0]
    assert a.step == 11 and a.layer == "b" and a.value == 50.0
    assert "50x its running median" in a.message and "clip_grad_norm_" in a.remedy
    # still high: no second alert until it has been calm for a while
    assert d.evaluate([13], rows([90.0, 1.0, 90.0]), ["a", "b"]) == []
    calm = [[1.0, 0.6, 0.8]] * REARM_SAMPLES
    assert d.evaluate(list(range(14, 14 + REARM_SAMPLES)), rows(*calm), ["a", "b"]) == []
    again = d.evaluate([100], rows([60.0, 1.0, 60.0]), ["a", "b"])
    assert [a.kind for a in again] == ["explosion"]


def test_rising_norm_is_flagged_before_it_is_an_explosion() -> None:
    """Half way to the alarm (on a log scale) the monitor is told to watch every step."""
    d = Detector("opt", Thresholds())
    d.evaluate(list(range(1, 11)), rows(*[[1.0, 0.6, 0.8]] * 10), ["a", "b"])
    assert not d.rising
    assert d.evaluate([11], rows([4.0, 1.0, 3.9]), ["a", "b"]) == []  # 4x: no alarm yet
    assert d.rising
    d.evaluate([12], rows([1.1, 0.6, 0.9]), ["a", "b"])
    assert not d.rising
    d.evaluate([13], rows([50.0, 1.0, 50.0]), ["a", "b"])  # an explosion is climbing too
    assert d.rising
    d.evaluate([14], rows([float("nan"), 1.0, float("nan")]), ["a", "b"])
    assert not d.rising  # a NaN run: every step would tell nothing more


def test_explosion_absolute_threshold_applies_from_the_first_step() -> None:
    d = Detector("opt", Thresholds(explode_abs=100.0))
    alerts = d.evaluate([1], rows([150.0, 150.0]), ["a"])
    assert [a.kind for a in alerts] == ["explosion"] and "threshold 100" in alerts[0].message


def test_non_finite_names_the_layer_closest_to_the_loss() -> None:
    d = Detector("opt", Thresholds())
    layers = ["model.embed", "model.mid", "model.head"]
    ok = [1.0, 0.5, 0.5, 0.5]
    bad = [math.inf, math.inf, math.nan, 0.5]  # head finite; mid produced the NaN
    alerts = d.evaluate([1, 2, 3], rows(ok, bad, bad), layers)
    assert [a.kind for a in alerts] == ["non_finite"]
    a = alerts[0]
    assert (a.step, a.layer, a.severity) == (2, "model.mid", "error")
    assert "2 of 3 layers" in a.message
    assert a.to_json()["value"] == "Infinity"


def test_non_finite_with_a_non_finite_loss_says_so() -> None:
    d = Detector("opt", Thresholds())
    alerts = d.evaluate([7], rows([math.nan, math.nan]), ["model.fc"], loss_nonfinite=True)
    assert "loss is non-finite too" in alerts[0].message
    assert "inputs and labels" in alerts[0].remedy


def test_vanishing_needs_many_consecutive_steps_and_names_the_first_layer() -> None:
    th = Thresholds(vanish_steps=10)
    d = Detector("opt", th)
    layers = ["l0", "l1", "l2"]
    tiny = [1.0, 1e-9, 1e-7, 1.0]  # l0 below the floor, l1 below 1e-5 of the total
    assert d.evaluate(list(range(9)), rows(*[tiny] * 9), layers) == []
    alerts = d.evaluate([9], rows(tiny), layers)
    assert [a.kind for a in alerts] == ["vanishing"]
    assert alerts[0].layer == "l0" and "and 1 more layer " in alerts[0].message
    assert d.evaluate([10, 11], rows(tiny, tiny), layers) == []  # once


def test_vanishing_ignores_exact_zero_and_resets_on_recovery() -> None:
    th = Thresholds(vanish_steps=5)
    d = Detector("opt", th)
    zero = [1.0, 0.0, 1.0]  # an unused branch is not "vanishing"
    assert d.evaluate(list(range(20)), rows(*[zero] * 20), ["a", "b"]) == []
    tiny, fine = [1.0, 1e-12, 1.0], [1.0, 0.5, 1.0]
    seq = [tiny] * 4 + [fine] + [tiny] * 4
    assert d.evaluate(list(range(20, 29)), rows(*seq), ["a", "b"]) == []


def test_amp_skips_are_counted_not_alarmed_until_repeated() -> None:
    d = Detector("opt", Thresholds())
    # scale column last: 65536 -> 32768 (one skip) -> same -> 8192 (two more)
    alerts = d.evaluate(
        [1, 2, 3, 4],
        rows([1, 1, 65536.0], [1, 1, 32768.0], [1, 1, 32768.0], [1, 1, 8192.0]),
        ["a"],
        amp=True,
    )
    assert alerts == [] and d.skipped == 3 and list(d.skip_steps) == [2, 4, 4]
    # many more halvings in a short run: repeated skips
    scales = [8192.0 / 2**k for k in range(1, 9)]
    alerts = d.evaluate(list(range(5, 13)), rows(*[[1, 1, s] for s in scales]), ["a"], amp=True)
    assert [a.kind for a in alerts] == ["amp_skips"]


def test_amp_collapsing_scale_alarms() -> None:
    d = Detector("opt", Thresholds(amp_skips=100))
    scales = [4.0, 2.0, 1.0, 0.5]
    alerts = d.evaluate([1, 10, 30, 60], rows(*[[1, 1, s] for s in scales]), ["a"], amp=True)
    assert [a.kind for a in alerts] == ["amp_scale_collapse"] and alerts[0].step == 60


def test_alert_log_rate_limit_and_history() -> None:
    now = [0.0]
    log_ = AlertLog(clock=lambda: now[0])
    d = Detector("opt", Thresholds(explode_abs=1.0))
    log_.add(d.evaluate([1], rows([5.0, 5.0]), ["a"]))
    assert len(log_.take()) == 1
    d2 = Detector("opt2", Thresholds(explode_abs=1.0))
    log_.add(d2.evaluate([1], rows([5.0, 5.0]), ["a"]))
    assert log_.take() == []  # within 0.5 s of the last message
    now[0] = 0.6
    assert len(log_.take()) == 1
    assert len(log_.snapshot()) == 2
    assert log_.clear() == 2 and log_.snapshot() == []


# --- whole training runs through the real step hook -------------------------------------


class RNNNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.RNN(4, 32, batch_first=True)
        self.head = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def layer_finiteness(model: nn.Module) -> dict[str, bool]:
    """Per layer: are the reference norms of its grads finite? (NaN/Inf, or overflow)"""
    out: dict[str, bool] = {}
    for name, p in model.named_parameters():
        layer = "model." + name.rpartition(".")[0]
        ok = p.grad is None or math.isfinite(float(torch.linalg.vector_norm(p.grad)))
        out[layer] = out.get(layer, True) and ok
    return out


def test_exploding_rnn_raises_explosion_then_non_finite_naming_the_layer() -> None:
    torch.manual_seed(0)
    model = RNNNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = torch.randn(16, 30, 4), torch.randn(16, 1)
    truth: list[dict[str, bool]] = []
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        for _ in range(40):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            log(loss=loss)
            loss.backward()
            truth.append(layer_finiteness(model))
            opt.step()
        s.end_cell()
        alerts = s.comm.alerts()
        kinds = [a["kind"] for a in alerts]
        # The non-finite step is diagnosed at the step (non_finite_cause, nonfinite.py), so
        # it may arrive before the explosion, which is checked at flush: order by step.
        assert kinds.count("explosion") == 1 and "divergence" not in kinds, alerts
        explosion = next(a for a in alerts if a["kind"] == "explosion")
        non_finite = next(a for a in alerts if a["kind"] in ("non_finite", "non_finite_cause"))
        # ground truth: the first step with a non-finite grad, and its layers in model order
        first = next(i for i, t in enumerate(truth) if not all(t.values()))
        bad = [layer for layer, ok in truth[first].items() if not ok]
        assert non_finite["step"] == first + 1
        if non_finite["kind"] == "non_finite":
            assert non_finite["layer"] == bad[-1]
        else:  # its cause names the layer (test_grads_nan_cause.py)
            assert non_finite["layer"] in (None, "model", "model.rnn", "model.head")
        assert explosion["step"] < non_finite["step"]
        assert explosion["layer"] in ("model.rnn", "model.head")
        assert all(a["remedy"] and a["track"] == "opt" for a in alerts)
        assert not s.ext.errors


def test_default_auto_stride_sees_an_early_explosion_step_by_step() -> None:
    """No set_stride: the auto mode's warm-up samples every step, so a run that blows up
    early shows the explosion before the NaN (a stride could jump straight to NaN)."""
    torch.manual_seed(0)
    model = RNNNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = torch.randn(16, 30, 4), torch.randn(16, 1)
    with session({"model": model, "opt": opt}) as s:
        for _ in range(40):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            log(loss=loss)
            loss.backward()
            opt.step()
        s.end_cell()
        track = s.track()
        assert track["mode"] == "auto" and track["sampled"] == 40
        # after the explosion it keeps sampling every step because the norm climbed
        assert track["stride"] == 1 and track["every_step"] == "rising"
        alerts = s.comm.alerts()
        kinds = [a["kind"] for a in alerts]
        # (the non-finite step is diagnosed at the step, the explosion at the next check)
        assert kinds.count("explosion") == 1 and "divergence" not in kinds, alerts
        assert {"non_finite", "non_finite_cause"} & set(kinds), kinds
        assert set(kinds) <= {"explosion", "non_finite", "non_finite_cause", "non_finite_forward"}
        explosion = next(a for a in alerts if a["kind"] == "explosion")
        assert all(explosion["step"] < a["step"] for a in alerts if a is not explosion)


def test_a_climbing_norm_makes_the_auto_stride_sample_every_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jupyterlab_torchdbg.kernel.grads import stride as stride_mod

    torch.manual_seed(0)
    model = nn.Linear(6, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # weights fixed: the loss sets the norm
    x, y = torch.randn(32, 6), torch.randn(32, 2)

    def steps(n: int, scale: float) -> None:
        for _ in range(n):
            opt.zero_grad()
            (scale * nn.functional.mse_loss(model(x), y)).backward()
            opt.step()

    with session({"model": model, "opt": opt}) as s:
        steps(20, 1.0)  # the warm-up fills the running median
        monkeypatch.setattr(stride_mod, "choose_stride", lambda *a, **k: 5)
        sampler = s.monitor.track_for(opt).sampler  # type: ignore[union-attr]
        sampler._boost, sampler.stride = 0, 5  # as after the warm-up of a long run
        steps(10, 1.0)
        s.end_cell()
        assert sampler.stride == 5 and not sampler.boosting
        assert s.track()["stride"] == 5 and s.track()["every_step"] is None
        before = s.track()["sampled"]
        steps(10, 5.0)  # 5x the median: not an explosion (10x), but climbing
        s.end_cell()
        assert s.comm.alerts() == []
        assert sampler.boosting and s.track()["stride"] == 1
        assert s.track()["every_step"] == "rising"
        sampled = s.track()["sampled"]
        assert sampled - before == 2  # still every 5th step until the check saw it
        steps(10, 5.0)
        assert s.track()["sampled"] - sampled == 10  # now every step


def test_healthy_run_raises_no_alarm() -> None:
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        for _ in range(200):
            opt.zero_grad()
            x = torch.randn(32, 16)
            loss = nn.functional.mse_loss(model(x), x[:, :4])
            log(loss=loss)
            loss.backward()
            opt.step()
        s.end_cell()
        assert s.comm.alerts() == []
        assert s.status()["alerts"] == 0


def test_vanishing_on_a_deep_sigmoid_mlp() -> None:
    torch.manual_seed(2)
    layers: list[nn.Module] = []
    for _ in range(20):
        layers += [nn.Linear(32, 32), nn.Sigmoid()]
    model = nn.Sequential(*layers, nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        for _ in range(60):
            opt.zero_grad()
            nn.functional.mse_loss(model(torch.randn(16, 32)), torch.randn(16, 1)).backward()
            opt.step()
        s.end_cell()
        alerts = s.comm.alerts()
        assert [a["kind"] for a in alerts] == ["vanishing"]
        assert alerts[0]["layer"] == "model.0"  # the input end is where it vanishes
        assert alerts[0]["step"] == Thresholds().vanish_steps


def train_amp(
    s: object, model: nn.Module, opt: torch.optim.Optimizer, scaler: object, poison: set
) -> list:
    refs = []
    for i in range(60):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 1))
        if i in poison:
            loss = loss * math.inf  # GradScaler sees inf and skips this step
        scaler.scale(loss).backward()  # type: ignore[attr-defined]
        scale = scaler.get_scale()  # type: ignore[attr-defined]
        refs.append(
            float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])) / scale
        )
        scaler.step(opt)  # type: ignore[attr-defined]
        scaler.update()  # type: ignore[attr-defined]
    return refs


def test_r31_amp_skipped_step_is_reported_not_alarmed_and_norms_are_unscaled() -> None:
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    with session({"model": model, "opt": opt, "scaler": scaler}) as s:
        s.comm.action("set_stride", {"stride": 1})
        refs = train_amp(s, model, opt, scaler, {10, 30})
        s.end_cell()
        track = s.track()
        assert track["skipped_steps"] == 2 and track["skipped_at"] == [11, 30]
        assert track["amp_scale"] == 16384.0 and track["step"] == 58
        assert s.comm.alerts() == []
        total = s.comm.series()["grad/opt/total"][1]
        expected = [r for r in refs if math.isfinite(r)]  # skipped steps never reach step()
        assert total.tolist() == pytest.approx(expected, rel=1e-5)
        assert "grad/opt/amp_scale" in s.comm.series()


def test_r31_repeated_amp_skips_alarm() -> None:
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    with session({"model": model, "opt": opt, "scaler": scaler}) as s:
        s.comm.action("set_stride", {"stride": 1})
        train_amp(s, model, opt, scaler, set(range(5, 50, 3)))
        s.end_cell()
        kinds = [a["kind"] for a in s.comm.alerts()]
        assert kinds == ["amp_skips"]


def test_r06_alerts_are_replayed_to_a_late_panel_without_popping_up() -> None:
    from grads_support import FakeComm

    from jupyterlab_torchdbg.protocol import COMM_TARGET, PROTOCOL_VERSION

    torch.manual_seed(0)
    model = RNNNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        x, y = torch.randn(16, 30, 4), torch.randn(16, 1)
        for _ in range(30):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        s.end_cell()
        live = s.comm.alerts()
        late = FakeComm()
        s.ext.hub._manager.targets[COMM_TARGET](
            late, {"content": {"data": {"method": "open", "protocol_version": PROTOCOL_VERSION}}}
        )
        methods = [d["method"] for d, _ in late.sent]
        assert methods[:2] == ["hello", "snapshot"] and "grads" in methods
        replay = late.messages("alert")
        assert len(replay) == 1 and replay[0]["replay"] is True
        assert [a["id"] for a in replay[0]["alerts"]] == [a["id"] for a in live]
        grads = late.messages("grads")[0]
        assert grads["tracks"][0]["layers"]  # a snapshot always lists the layers
        # the snapshot carries the history of the gradient block
        snap = late.messages("snapshot")[0]
        assert any("grad/opt/total" in b["names"] for b in snap["blocks"])
        # clear_alerts: not replayed any more
        assert s.comm.action("clear_alerts")["result"]["cleared"] == len(live)
        later = FakeComm()
        s.ext.hub._manager.targets[COMM_TARGET](
            later, {"content": {"data": {"method": "open", "protocol_version": PROTOCOL_VERSION}}}
        )
        assert later.messages("alert") == []


def test_vanishing_spreading_to_more_layers_is_one_alert() -> None:
    d = Detector("opt", Thresholds(vanish_steps=5))
    layers = ["l0", "l1", "l2"]
    first = [1.0, 1e-12, 1.0, 1.0]  # l0 vanishes
    both = [1.0, 1e-12, 1e-12, 1.0]  # then l1 too
    alerts = d.evaluate(list(range(6)), rows(*[first] * 6), layers)
    assert [a.layer for a in alerts] == ["l0"]
    assert d.evaluate(list(range(6, 20)), rows(*[both] * 14), layers) == []
    fine = [1.0, 1.0, 1.0, 1.0]  # everything recovers: armed again
    assert d.evaluate([20], rows(fine), layers) == []
    again = d.evaluate(list(range(21, 27)), rows(*[both] * 6), layers)
    assert [a.layer for a in again] == ["l0"] and "and 1 more layer" in again[0].message
