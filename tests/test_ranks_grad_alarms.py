"""A job's gradient alarms from the ranks' own reports (issue #22 item 5): the kernel's
side (ranks/kernel/grad_alarms.py) fed ``rows`` messages as workers send them, and the
worker's side (ranks/worker/rank_signals.py) on a real model with the kernel's diagnosis.

- One event, one alarm: the ranks' reports of a NaN at one step are grouped; the alarm
  waits until every live rank was checked past that step and names the rank whose own
  batch / forward / loss made it; the others hold it through the all-reduce.
- When no rank's own data made it, the alarm says which could not be told.
- Explosion on one rank names it; the same all-reduced norm on every rank says the
  origin is not known.
- R52: what a worker sends is validated and bounded.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from test_ranks_job import Harness, w
from torch import nn

from jupyterlab_torchdbg.kernel.watches import add_watch
from jupyterlab_torchdbg.ranks.kernel import grad_alarms
from jupyterlab_torchdbg.ranks.worker.rank_signals import RankSignals
from jupyterlab_torchdbg.ranks.worker.reader import Read, Reader


@pytest.fixture
def h() -> Harness:
    hh = Harness()
    for n in range(2):
        hh.hello(n, world=2, key="k2")
    return hh


def send(
    h: Harness,
    n: int,
    steps: range,
    norm: Any = 1.0,
    bad: dict[int, dict[str, Any]] | None = None,
    signals: list[dict[str, Any]] | None = None,
    checked: int | None = None,
) -> None:
    rows = []
    for s in steps:
        row: dict[str, Any] = {"step": s, "t": 0.0, "dt": 0.05, "norm": norm, "mem": 1}
        if bad and s in bad:
            row["norm"] = "NaN"
            row["nonfinite"] = bad[s]
        rows.append(row)
    content: dict[str, Any] = {"rows": rows, "layers": None, "own": 0.5, "phase": "user"}
    if signals is not None:
        content["signals"] = signals
    content["checked"] = checked if checked is not None else steps[-1]
    h.hub.on_message(w(n), "rows", content)


INPUT = {
    "cause": "input",
    "layer": "model",
    "message": "the input batch of model holds NaN: `x` (32x8) at index [3, 0]",
    "rerun": True,
    "batch_finite": False,
}
CLEAN = {
    "cause": "backward",
    "layer": "2",
    "message": "every module output is finite (largest output 1.2) and the loss is finite",
    "rerun": True,
    "batch_finite": True,
}


def test_nan_from_one_ranks_batch_waits_for_every_rank_then_names_it(h: Harness) -> None:
    send(h, 0, range(1, 26))
    send(h, 1, range(1, 26))
    send(h, 0, range(26, 31), bad={26: CLEAN})
    h.tick()
    assert h.alarms("non_finite") == []  # rank 1 not checked past step 26 yet
    send(h, 1, range(26, 31), bad={26: INPUT})
    (alarm,) = h.alarms("non_finite")
    assert (alarm["rank"], alarm["step"], alarm["cause"], alarm["layer"]) == (
        1,
        26,
        "input",
        "model",
    )
    assert alarm["ranks"] == [0, 1]
    assert alarm["message"] == (
        "Non-finite gradient at step 26, from rank 1: the input batch of model holds NaN: "
        "`x` (32x8) at index [3, 0]. Rank 0 holds it only through the all-reduce: its own "
        "batch and forward pass are finite."
    )
    assert alarm["remedy"] == grad_alarms.REMEDY["input"]
    h.tick()
    assert len(h.alarms("non_finite")) == 1  # one event, one alarm


def test_a_rank_that_samples_the_step_later_joins_with_what_it_saw_then(h: Harness) -> None:
    send(h, 0, range(1, 26))
    send(h, 1, range(1, 25))  # stride 4 on rank 1: 24 sampled, then 28
    send(h, 0, range(26, 27), bad={26: CLEAN})
    h.tick()
    assert h.alarms("non_finite") == []
    rows = [{"step": s, "t": 0.0, "dt": 0.05, "norm": None, "mem": 1} for s in (25, 26, 27)]
    rows.append({"step": 28, "t": 0.0, "dt": 0.05, "norm": "NaN", "nonfinite": INPUT})
    h.hub.on_message(w(1), "rows", {"rows": rows, "own": 0.5, "phase": "user", "checked": 28})
    (alarm,) = h.alarms("non_finite")
    assert (alarm["rank"], alarm["step"], alarm["ranks"]) == (0, 26, [0, 1])
    # rank 1's finding is of its step 28, after step 26's update: not of step 26 (R47),
    # so what made step 26's NaN is not known
    assert alarm["cause"] == "unknown"
    assert alarm["message"] == (
        "Non-finite gradient at step 26 on ranks 0, 1; the ranks' own data checked did not "
        "make it. Rank 0: its own batch and forward pass are finite. Rank 1 read it first "
        "at step 28 (its stride skipped step 26): the input batch of model holds NaN: `x` "
        "(32x8) at index [3, 0]."
    )


def test_a_rank_that_never_reports_does_not_hold_the_alarm_forever(h: Harness) -> None:
    send(h, 0, range(1, 27), bad={26: INPUT})
    send(h, 1, range(1, 20))  # rank 1 is behind and stays silent
    h.tick()
    assert h.alarms("non_finite") == []
    for _ in range(int(grad_alarms.WAIT_S / 0.1) + 2):
        h.tick()
    (alarm,) = h.alarms("non_finite")
    assert (alarm["rank"], alarm["ranks"], alarm["cause"]) == (0, [0], "input")
    assert alarm["message"].startswith("Non-finite gradient at step 26, from rank 0")


def test_ranks_reporting_every_few_seconds_are_waited_for_one_interval_more(h: Harness) -> None:
    """In a large world each rank reports every ``report_s`` (6.4 s at 256 ranks): the
    event waits that long past WAIT_S for the rank where the NaN began, so the alarm names
    it from the first, and a silent rank still releases it then."""
    for rank in h.hub.jobs[-1].ranks.values():
        rank.report_s = 6.4
    send(h, 0, range(1, 27), bad={26: CLEAN})
    send(h, 1, range(1, 20))
    h.tick(grad_alarms.WAIT_S + 1.0)  # past WAIT_S, within rank 1's interval
    assert h.alarms("non_finite") == []
    send(h, 1, range(20, 27), bad={26: INPUT})
    (alarm,) = h.alarms("non_finite")
    assert (alarm["rank"], alarm["ranks"], alarm["cause"]) == (1, [0, 1], "input")
    send(h, 0, range(27, 40), bad={39: CLEAN})  # a second event; rank 1 stays silent
    h.tick(grad_alarms.WAIT_S + 1.0)
    assert len(h.alarms("non_finite")) == 1
    h.tick(6.4)
    assert len(h.alarms("non_finite")) == 2


def test_a_rank_that_exits_before_the_step_releases_the_alarm_at_once(h: Harness) -> None:
    send(h, 0, range(1, 27), bad={26: INPUT})
    send(h, 1, range(1, 20))
    assert h.alarms("non_finite") == []
    h.hub.on_message(w(1), "bye", {"state": "exited"})  # rank 1 is gone: no tick needed
    (alarm,) = h.alarms("non_finite")
    assert alarm["rank"] == 0 and alarm["cause"] == "input"


def test_every_rank_clean_says_which_one_cannot_be_told(h: Harness) -> None:
    for n in range(2):
        send(h, n, range(1, 27), bad={26: CLEAN})
    (alarm,) = h.alarms("non_finite")
    assert (alarm["rank"], alarm["cause"]) == (0, "backward")
    assert "which one cannot be told from the averaged gradients" in alarm["message"]
    # R47: no loss module was called on the batches: the loss is not called finite
    assert "the loss was not checked" in alarm["message"]
    assert "the loss or backward made it" in alarm["message"]
    assert "Replay" not in alarm["remedy"]


def test_r47_a_loss_read_on_every_rank_is_named_finite(h: Harness) -> None:
    for n in range(2):
        send(h, n, range(1, 27), bad={26: {**CLEAN, "loss_checked": True}})
    (alarm,) = h.alarms("non_finite")
    assert (
        "on each, its own batch, forward pass and loss are finite, so backward made it"
        in (alarm["message"])
    )


def test_weights_already_nan_on_every_rank_says_the_origin_is_lost(h: Harness) -> None:
    weights = {
        "cause": "weights",
        "layer": "model.0",
        "message": "model.0's own weights are already NaN/Inf before this step's update",
        "rerun": True,
        "batch_finite": True,
    }
    for n in range(2):
        send(h, n, range(1, 27), bad={26: weights})
    (alarm,) = h.alarms("non_finite")
    assert alarm["cause"] == "weights" and alarm["rank"] == 0
    assert "which rank's batch began it cannot be told any more" in alarm["message"]


def test_a_forward_not_rerun_is_said_with_its_reason(h: Harness) -> None:
    batch_only = {
        "cause": "unknown",
        "layer": "2",
        "message": "its batch is finite; the forward was not re-run: SyncBatchNorm",
        "rerun": False,
        "why_not_rerun": "its SyncBatchNorm layers exchange statistics with the other ranks",
        "batch_finite": True,
    }
    send(h, 0, range(1, 27), bad={26: batch_only})
    send(h, 1, range(1, 27), bad={26: INPUT})
    (alarm,) = h.alarms("non_finite")
    assert alarm["rank"] == 1
    assert (
        "Rank 0: its own batch is finite (the forward was not re-run: its SyncBatchNorm "
        "layers exchange statistics with the other ranks)." in alarm["message"]
    )
    assert "holds it only through" not in alarm["message"]  # not checked: not claimed


def explosion(step: int, value: float) -> dict[str, Any]:
    return {
        "kind": "explosion",
        "step": step,
        "layer": "2",
        "message": f"Gradient explosion at step {step}: total norm {value:.3g} is 1e+04x "
        "its running median 1 (alarm above 10x); 2 carries 99% of the norm.",
        "remedy": "Clip gradients or lower the learning rate.",
        "value": value,
    }


def test_an_explosion_on_one_rank_names_it_with_the_others_norms(h: Harness) -> None:
    send(h, 0, range(1, 31), norm=0.5)
    send(h, 1, range(1, 31), norm=0.7, signals=[explosion(26, 9e3)])
    (alarm,) = h.alarms("explosion")
    assert (alarm["rank"], alarm["step"], alarm["ranks"], alarm["layer"]) == (1, 26, [1], "2")
    assert alarm["message"].startswith("Rank 1: Gradient explosion at step 26")
    assert alarm["message"].endswith("The other ranks' total norms at step 26: rank 0 0.5.")
    assert alarm["remedy"] == "Clip gradients or lower the learning rate."


def test_the_same_explosion_on_every_rank_does_not_blame_one(h: Harness) -> None:
    send(h, 0, range(1, 31), signals=[explosion(26, 9e3)])
    h.tick()
    assert h.alarms("explosion") == []  # rank 1's detector has not judged step 26 yet
    send(h, 1, range(1, 31), signals=[explosion(26, 9e3)])
    (alarm,) = h.alarms("explosion")
    assert (alarm["rank"], alarm["ranks"]) == (0, [0, 1])
    assert "which rank's batch caused it is not known" in alarm["message"]


def test_an_all_reduced_explosion_read_at_another_step_is_the_same_alarm(h: Harness) -> None:
    # rank 1 samples every 4th step: it reads the explosion first at step 28; both
    # ranks read equal norms at every step they both sampled (DDP)
    send(h, 0, range(1, 31), signals=[explosion(26, 9e3)])
    rows = [
        {"step": s, "t": 0.0, "dt": 0.05, "norm": 1.0 if s % 4 == 0 else None, "mem": 1}
        for s in range(1, 31)
    ]
    content = {"rows": rows, "own": 0.5, "phase": "user", "checked": 30}
    h.hub.on_message(w(1), "rows", {**content, "signals": [explosion(28, 8e3)]})
    (alarm,) = h.alarms("explosion")
    assert (alarm["rank"], alarm["step"], alarm["ranks"]) == (0, 26, [0, 1])
    assert "which rank's batch caused it is not known" in alarm["message"]
    assert "(read first by rank 1 at step 28: its stride skipped step 26)" in alarm["message"]


def test_r52_what_a_worker_sends_is_validated_and_bounded(h: Harness) -> None:
    odd = {
        "cause": "__import__('os').system('x')",
        "layer": ["not", "text"],
        "message": "m" * 1_000_000,
        "rerun": "yes",
    }
    signals = [
        {"kind": "eval", "step": 3, "message": "x"},
        {"kind": "explosion", "step": -1, "message": "x"},
        {"kind": "vanishing", "step": 5, "message": 7, "value": "big", "layer": "L" * 10_000},
        "not a dict",
    ]
    send(h, 0, range(1, 7), bad={4: odd}, signals=signals)
    send(h, 1, range(1, 7))
    for _ in range(int(grad_alarms.WAIT_S / 0.1) + 2):
        h.tick()
    (nan,) = h.alarms("non_finite")
    assert nan["cause"] == "unknown" and nan["layer"] is None
    assert len(nan["message"]) <= 2000
    (vanish,) = h.alarms("vanishing")
    assert vanish["step"] == 5 and len(vanish["layer"]) == 512
    # (rank 0's NaN against rank 1's finite norm at step 4 is also a desync)
    assert {a["kind"] for a in h.alarms()} == {"non_finite", "vanishing", "desync"}


# --- the worker's side: the kernel's diagnosis on a rank's own batch --------------------


class Net(nn.Module):
    def __init__(self, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.norm = norm if norm is not None else nn.Identity()
        self.head = nn.Linear(8, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(torch.relu(self.fc(features))))


class SqrtGate(nn.Module):
    """A forward that makes NaN from finite inputs: sqrt of a negative feature."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.fc(features) * torch.sqrt(features[:, :1])


@contextlib.contextmanager
def rerun_forward(model: nn.Module) -> Iterator[None]:
    """``watch(model, rerun_forward=True)`` in the rank's process, for the block."""
    handle = add_watch(model, rerun_forward=True)
    try:
        yield
    finally:
        handle.remove()


def one_step(model: nn.Module, x: torch.Tensor) -> tuple[RankSignals, Any]:
    """Two steps of a loop as a rank runs it: the reader finds the model at the first
    read and the signals keep its calls; the second step's batch is ``x``."""
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    reader, signals = Reader(), RankSignals(lambda where: None)
    finding = None
    for batch in (torch.rand(16, 4), x):
        opt.zero_grad()
        model(batch).sum().backward()
        frame = sys._getframe()
        read = reader.read(opt, frame)
        if read.module is not None:
            signals.watch(read.module, read.module_name, frame)
        finding = signals.at_read(2, read)
    return signals, finding


def test_a_ranks_nan_input_is_named_with_its_tensor_and_index() -> None:
    x = torch.randn(16, 4)
    x[5, 2] = float("nan")
    model = Net()
    signals, finding = one_step(model, x)
    assert finding["cause"] == "input"
    # Net.forward is the user's code: only the batch was checked, not re-run (R53)
    assert finding["rerun"] is False and "Net.forward" in finding["why_not_rerun"]
    assert finding["message"] == (
        "the input batch of model holds NaN: `features` (16x4) at index [5, 2]"
    )
    assert signals.keeper is not None and signals.keeper.hooked() == [model]
    signals.remove()
    assert not model._forward_pre_hooks  # every hook goes


def test_a_ranks_forward_that_makes_nan_is_named() -> None:
    x = torch.rand(16, 4)
    x[7, 0] = -1.0  # finite, but the forward takes its square root
    model = SqrtGate()
    with rerun_forward(model):  # the user's own forward, re-run on the user's word (R53)
        _, finding = one_step(model, x)
    assert finding["cause"] == "forward" and finding["layer"] == "model"
    assert finding["message"].startswith("model's forward turns finite inputs into NaN/Inf")


def test_r35_a_model_with_syncbatchnorm_is_not_rerun_and_says_why() -> None:
    # a forward through SyncBatchNorm in training mode would wait for the other ranks:
    # only the batch is checked, and the finding says so
    model = Net(nn.BatchNorm1d(8))
    signals, _ = one_step(model, torch.randn(16, 4))  # a finite batch is kept
    model.norm = nn.SyncBatchNorm(8)  # as convert_sync_batchnorm makes it
    nan_read = Read(float("nan"), [float("nan")], ["head"], model, "model", [], [])
    out = signals.diagnose(3, nan_read)
    assert out["rerun"] is False and "SyncBatchNorm" in out["why_not_rerun"]
    assert out["batch_finite"] is True and out["cause"] == "unknown"
    assert out["layer"] == "head"


class SqrtOfRelu(nn.Module):
    """Finite forward, NaN gradient: sqrt at 0 (its derivative is infinite, times 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 1)
        with torch.no_grad():
            self.fc.weight.fill_(1.0)
            self.fc.bias.fill_(10.0)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        y = self.fc(features)
        return torch.sqrt(y * (y > 0))  # a zero where y <= 0: inf x 0 in backward


def test_r47_backward_with_a_loss_module_read_says_the_loss_was_checked() -> None:
    model, criterion = SqrtOfRelu(), nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    reader, signals = Reader(), RankSignals(lambda where: None)
    bad = torch.rand(8, 4)
    bad[2] = -100.0  # a finite input whose output is masked to 0
    findings = []
    with rerun_forward(model):  # the user's own forward, re-run on the user's word (R53)
        for batch in (torch.rand(8, 4), bad):
            opt.zero_grad()
            criterion(model(batch), torch.ones(8, 1)).backward()
            frame = sys._getframe()
            read = reader.read(opt, frame)
            signals.watch(read.module, read.module_name, frame)
            findings.append(signals.at_read(len(findings) + 1, read))
    assert findings[0] is None
    finding = findings[1]
    assert finding["cause"] == "backward" and finding["loss_checked"] is True
    assert finding["batch_finite"] is True and finding["rerun"] is True
    signals.remove()


def judged(scales: list[float], weights: bool, lr: float = 1e-3) -> list[dict[str, Any]]:
    """A rank's reads of a model whose gradients are ``scale`` times a fixed direction at
    each step, judged as the worker's agent does (with the weights' norms read as the
    worker reads them, or without)."""
    from jupyterlab_torchdbg.kernel.grads.loop_clip import learning_rate

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    direction = [torch.randn_like(p) for p in model.parameters()]
    reader, signals = Reader(), RankSignals(lambda where: None)
    for step, scale in enumerate(scales, 1):
        for p, d in zip(model.parameters(), direction, strict=True):
            p.grad = d * scale
        read = reader.read(opt, None)
        signals.at_read(step, read)
        now = step * 0.25
        if weights and signals.wants_weights(step, now):
            row = reader.weights(opt, None)
            assert row is not None
            signals.at_weights(step, now, row, learning_rate(opt))
    return signals.judge(clipping=False)


def test_a_converged_ranks_jitter_is_no_explosion_against_its_weights() -> None:
    # issue #22: a converged model's gradient norm (~1e-5) jumping x20 is no explosion:
    # the update it makes is nothing against the weights (as in the kernel, explosion.py)
    scales = [1e-5] * 40 + [2e-4] + [1e-5] * 19
    assert [a["kind"] for a in judged(scales, weights=True)] == []
    # without the weights' scale the rank's detector took it for one
    assert "explosion" in [a["kind"] for a in judged(scales, weights=False)]


def test_a_real_explosion_on_a_rank_is_still_alarmed_with_its_weights() -> None:
    scales = [0.05] * 40 + [50.0] * 20  # x1000, an update of consequence
    kinds = [a["kind"] for a in judged(scales, weights=True)]
    assert "explosion" in kinds
