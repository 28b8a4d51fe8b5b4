"""Replay of a non-finite step under anomaly detection (grads/replay.py, replay_run.py).

The ``BadStep``s are built from real models and batches (what the at-step diagnosis keeps)
and replayed with real torch; the end-to-end tests go through a real training loop, the
step boundary's capture and the ``replay_step`` action of the loaded extension.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from typing import Any

import pytest
import torch
from grads_support import session
from torch import nn

from jupyterlab_torchdbg.kernel.action_registry import ActionError
from jupyterlab_torchdbg.kernel.grads import replay as replay_mod
from jupyterlab_torchdbg.kernel.grads.bad_step import BadStep, KeptCall, KeptLoss, KeptRoot
from jupyterlab_torchdbg.kernel.grads.replay import Replayer
from jupyterlab_torchdbg.kernel.grads.replay_report import user_frames
from jupyterlab_torchdbg.kernel.grads.replay_run import eager

THIS = __file__


class Host:
    """The smallest ``Host`` a ``Replayer`` reads: errors and whether a cell runs."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.running = False

    def count_error(self, site: str) -> None:
        self.errors.append(site)

    def others_running(self) -> bool:
        return self.running


def bad_step(
    model: nn.Module,
    *args: Any,
    losses: list[KeptLoss] | None = None,
    root: KeptRoot | None = None,
    **kwargs: Any,
) -> BadStep:
    return BadStep(
        track="opt",
        step=7,
        optimizer=None,
        roots=[("model", weakref.ref(model))],
        calls={"model": KeptCall(tuple(args), dict(kwargs), 1)},
        losses=losses or [],
        root=root,
    )


def backward_root(kind: str, source: str | None, value: float = 0.5) -> KeptRoot:
    """What ``backward()`` was called on at the bad step, as the keeper records it."""
    return KeptRoot((torch.tensor(value),), ((),), kind, source, True, "MeanBackward0", 2)


def run(model: nn.Module, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Capture ``model``'s call on ``args`` as a bad step and replay it (``model`` is
    held here: the step holds it by weakref, as the capture does)."""
    rep = Replayer(Host())  # type: ignore[arg-type]
    rep.capture(bad_step(model, *args, **kwargs))
    return rep.run(None)


def line_of(text: str) -> int:
    """The line number of ``text`` in this file (the forward stack must point at it)."""
    with open(THIS) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "line_of" not in line)


class SqrtAtZero(nn.Module):
    """Finite forward, NaN/Inf in backward: d sqrt(x)/dx at 0 is inf."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.fc(x)))
        return torch.sqrt(h * 0).mean()  # the NaN's line


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x - x)  # log of 0


class LogInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.log = Log()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.log(self.fc(x)))


class HFStyle(nn.Module):
    """Keyword call returning an object with ``.loss`` (a transformers ModelOutput)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        logits = self.head(self.emb(input_ids))
        dist = torch.sqrt((logits - logits).pow(2).sum(-1, keepdim=True))  # sqrt at 0
        logits = logits + dist
        loss = nn.functional.cross_entropy(logits.view(-1, 10), labels.view(-1))
        return type("Out", (dict,), {"loss": property(lambda s: s["loss"])})(
            loss=loss, logits=logits
        )


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(self.fc(x) * 0)  # per-element output, no loss


def test_backward_nan_names_the_op_and_the_users_line() -> None:
    torch.manual_seed(0)
    res = run(SqrtAtZero(), torch.randn(8, 4))
    assert res["cause"] == "backward" and not res["finite"]
    assert res["backward_op"] == "SqrtBackward0"
    assert res["loss_root"] == "model" and res["weights"] == "pre-step"
    top = res["forward_stack"][-1]
    assert top["file"] == THIS and top["line"] == line_of("# the NaN's line")
    assert top["name"] == "forward" and "torch.sqrt" in top["code"]
    assert all("/torch/" not in f["file"] for f in res["forward_stack"])
    assert all("jupyterlab_torchdbg" not in f["file"] for f in res["forward_stack"])
    assert "SqrtBackward0" in res["message"]


def test_forward_inf_in_a_submodule_is_reported_at_its_output() -> None:
    res = run(LogInside(), torch.randn(3, 4))
    assert res["cause"] == "forward" and not res["finite"]
    assert res["output"] == "out" and res["backward_op"] is None
    assert res["forward_op"] == "log"
    top = res["forward_stack"][-1]
    assert top["line"] == line_of("# log of 0") and top["name"] == "forward"
    assert "NaN/Inf in out" in res["message"]


def test_hf_style_keyword_call_uses_the_models_loss() -> None:
    ids = torch.randint(0, 10, (2, 5))
    res = run(HFStyle(), input_ids=ids, labels=ids)
    assert res["loss_root"] == "model"
    assert res["cause"] == "backward" and res["backward_op"] == "SqrtBackward0"
    assert res["forward_stack"][-1]["line"] == line_of("# sqrt at 0")


def test_kept_loss_module_is_the_backward_root() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)

    class Sqrt(nn.MSELoss):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return super().forward(torch.sqrt((a - a) ** 2 + 0), b)  # sqrt at 0 in the loss

    crit = Sqrt()
    target = torch.zeros(2, 3, 2)
    kept = KeptLoss(weakref.ref(crit), "criterion", (2, 3, 2), (target,))
    res = run(Model(), torch.randn(2, 4), losses=[kept])
    assert res["loss_root"] == "loss_module:criterion"
    assert res["cause"] == "backward" and res["backward_op"] == "SqrtBackward0"
    assert res["forward_stack"][-1]["line"] == line_of("# sqrt at 0 in the loss")


def test_r47_a_finite_replay_of_the_users_own_loss_says_it_does_not_reproduce() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 1))
    loss_fn = nn.MSELoss()
    kept = KeptLoss(weakref.ref(loss_fn), "loss_fn", (5, 1), (torch.zeros(5, 1),))
    root = backward_root("loss_module", "loss_fn")
    res = run(model, torch.randn(5, 4), losses=[kept], root=root)
    assert res["loss_root"] == "loss_module:loss_fn" and res["user_loss"] == "same"
    assert res["finite"] and res["cause"] == "finite" and res["backward_op"] is None
    assert res["reproduces"] is False and "does not reproduce" in res["message"]
    # what the replay did not repeat, for this model: its dropout masks
    assert "dropout masks" in res["message"]


def test_r47_a_loss_module_not_known_to_be_the_users_loss_is_not_said_to_reproduce() -> None:
    """What backward() was called on was not seen: the replay may still run a loss
    module of the notebook, but whether that is the user's loss was not checked."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    loss_fn = nn.MSELoss()
    kept = KeptLoss(weakref.ref(loss_fn), "loss_fn", (5, 1), (torch.zeros(5, 1),))
    res = run(model, torch.randn(5, 4), losses=[kept])
    assert res["loss_root"] == "loss_module:loss_fn" and res["user_loss"] == "unseen"
    assert res["finite"] and res["reproduces"] is None
    assert "does not reproduce" not in res["message"] and "randomness" not in res["message"]
    assert "was not checked" in res["message"]


def test_r47_an_expression_loss_is_not_rerun_and_never_blamed_on_randomness() -> None:
    """``((out - y) ** 2).mean()`` cannot be re-run: the surrogate's finite result says
    plainly that reproduction was not checked; the loss read at the step is reported."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    root = backward_root("expression", None, value=math.inf)
    res = run(model, torch.randn(5, 4), root=root)
    assert res["loss_root"] == "surrogate" and res["user_loss"] == "not_rerun"
    assert res["finite"] and res["reproduces"] is None
    msg = res["message"]
    assert "cannot re-run your loss" in msg and "sum of the model's outputs" in msg
    assert "was not checked" in msg and "+Inf (read at the step)" in msg
    assert "does not reproduce" not in msg and "random" not in msg


def test_surrogate_when_no_loss_is_known() -> None:
    res = run(Plain(), torch.randn(2, 4))
    assert res["loss_root"] == "surrogate"
    assert res["backward_op"] == "SqrtBackward0" and res["reproduces"] is True
    assert "sum of the model's outputs" in res["message"]


def test_pre_step_weights_reproduce_after_the_user_changed_them() -> None:
    class Div(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x / self.w.abs()).sum()  # division by a zero weight

    model = Div()
    rep = Replayer(Host())  # type: ignore[arg-type]
    rep.capture(bad_step(model, torch.ones(2, 3)))
    with torch.no_grad():
        model.w.fill_(1.0)  # the optimizer moved on: the current weights are fine
    res = rep.run(None)
    assert res["weights"] == "pre-step" and not res["finite"]
    assert res["cause"] == "forward" and res["forward_op"] == "div"


def test_over_the_bound_the_current_weights_are_used_and_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replay_mod, "MAX_SNAPSHOT_BYTES", 16)
    res = run(SqrtAtZero(), torch.randn(8, 4))
    assert res["weights"] == "current" and "current weights" in res["message"]
    assert res["backward_op"] == "SqrtBackward0"


def test_user_grads_params_buffers_and_rng_are_untouched() -> None:
    torch.manual_seed(1)
    model = SqrtAtZero()
    x = torch.randn(8, 4)
    model(x).backward()  # the user's own step left .grad (NaN) and BN statistics
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    grad_ids = [id(p.grad) for p in model.parameters()]
    rng = torch.get_rng_state()
    res = run(model, x)
    assert res["backward_op"] == "SqrtBackward0"
    after = model.state_dict()
    for k, v in before.items():
        assert torch.equal(v, after[k]), k  # running_mean / var / num_batches_tracked too
    assert [id(p.grad) for p in model.parameters()] == grad_ids
    kept = [p.grad for p in model.parameters() if p.grad is not None]
    for a, b in zip(grads, kept, strict=True):
        torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(torch.get_rng_state(), rng)


def test_nothing_captured_is_refused_with_a_reason() -> None:
    rep = Replayer(Host())  # type: ignore[arg-type]
    with pytest.raises(ActionError, match="nothing to replay") as e:
        rep.run(None)
    assert e.value.code == "refused"
    model = SqrtAtZero()
    rep.capture(bad_step(model, torch.randn(8, 4)))
    with pytest.raises(ActionError, match="no bad step of 'other'"):
        rep.run("other")
    del model  # the model is gone: nothing to replay either
    with pytest.raises(ActionError, match="gone"):
        rep.run(None)
    rep.clear()
    assert rep.available() is None


def test_input_batch_with_nan_is_named() -> None:
    x = torch.randn(2, 4)
    x[1, 2] = float("nan")
    res = run(Plain(), x)
    assert res["cause"] == "input" and res["output"] == "args[0]"


def test_user_frames_keep_cells_and_drop_what_ran_the_replay() -> None:
    own = replay_mod.__file__
    lines = [
        '  File "/usr/lib/python3/site-packages/ipykernel/kernelbase.py", line 5, in r\n    x()\n',
        '  File "/tmp/ipykernel_1/123.py", line 9, in <module>\n    opt.step()\n',
        f'  File "{own}", line 10, in run\n    replay()\n',
        f'  File "{torch.__file__}", line 3, in _call_impl\n    forward()\n',
        '  File "<ipython-input-3-abc>", line 4, in forward\n    return torch.log(x)\n',
    ]
    frames = user_frames(lines)
    assert frames == [
        {
            "file": "<ipython-input-3-abc>",
            "line": 4,
            "name": "forward",
            "code": "return torch.log(x)",
        }
    ]


def train(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        model(x).backward()
        opt.step()


class Breaks(nn.Module):
    """Healthy until ``broken`` is set, then sqrt at 0 in forward (NaN in backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.broken = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if self.broken:
            return torch.sqrt(h * 0).mean()  # breaks here
        return h.pow(2).mean()


def test_end_to_end_capture_action_status_and_alert() -> None:
    torch.manual_seed(0)
    model = Breaks()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 4)
    with session({"model": model, "opt": opt}) as s:
        reply = s.comm.action("replay_step")
        assert reply["code"] == "refused" and "nothing to replay" in reply["message"]
        train(model, opt, x, 3)
        model.broken = True
        train(model, opt, x, 2)
        s.end_cell()
        assert s.status()["replayable"] == {"track": "opt", "step": 4}
        assert s.comm.messages("grads")[-1]["replayable"] == {"track": "opt", "step": 4}
        reply = s.comm.action("replay_step", {"track": "opt"})
        assert reply["method"] == "ack", reply
        res = reply["result"]
        assert res["step"] == 4 and res["backward_op"] == "SqrtBackward0"
        assert res["weights"] == "pre-step" and res["forward_stack"][-1]["line"] == line_of(
            "# breaks here"
        )
        alert = [a for a in s.comm.alerts() if a["kind"] == "non_finite_replay"][-1]
        assert alert["replay"]["backward_op"] == "SqrtBackward0" and alert["step"] == 4
        assert s.comm.action("replay_step", {"track": 3})["code"] == "invalid_args"
        assert s.comm.action("replay_step", {"x": 1})["code"] == "invalid_args"
        s.comm.action("clear_alerts")
        assert s.status()["replayable"] is None


def test_while_a_cell_trains_the_replay_runs_at_the_next_step_boundary() -> None:
    torch.manual_seed(0)
    model = Breaks()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 4)
    with session({"model": model, "opt": opt}) as s:
        train(model, opt, x, 1)  # the batch of a step is kept from the second one on
        model.broken = True
        train(model, opt, x, 1)
        assert s.status()["replayable"] == {"track": "opt", "step": 2}
        s.shell.events.trigger("pre_run_cell", None)  # the main thread "trains"
        ran_on: list[str] = []
        orig = s.monitor.replayer._replay

        def spy(*a: Any) -> dict[str, object]:
            ran_on.append(threading.current_thread().name)
            return orig(*a)

        s.monitor.replayer._replay = spy  # type: ignore[method-assign]
        reply: list[dict[str, Any]] = []
        t = threading.Thread(
            target=lambda: reply.append(s.comm.action("replay_step")), name="subshell"
        )
        t.start()
        deadline = time.monotonic() + 5
        while not s.monitor.replayer._jobs.waiting and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ran_on == [] and reply == []  # not run on the comm thread mid-step
        train(model, opt, x, 1)  # the step boundary runs it
        t.join(10)
        assert ran_on == [threading.main_thread().name]
        assert reply[0]["method"] == "ack" and reply[0]["result"]["backward_op"] == "SqrtBackward0"
        s.end_cell()


def test_no_step_coming_is_refused_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_mod, "REPLAY_TIMEOUT_S", 0.2)
    host = Host()
    host.running = True
    rep = Replayer(host)  # type: ignore[arg-type]
    rep.capture(bad_step(SqrtAtZero(), torch.randn(8, 4)))
    with pytest.raises(ActionError, match="reached no optimizer step"):
        rep.run(None)
    rep.close()
    with pytest.raises(ActionError, match="nothing to replay"):
        rep.run(None)


def test_wrappers_are_replayed_through_their_plain_module() -> None:
    """DataParallel's forward (DDP's: collectives) and torch.compile are not replayed."""
    model = SqrtAtZero()
    assert eager(nn.DataParallel(model)) is model
    res = run(nn.DataParallel(model), torch.randn(8, 4))
    assert res["backward_op"] == "SqrtBackward0" and res["weights"] == "pre-step"
