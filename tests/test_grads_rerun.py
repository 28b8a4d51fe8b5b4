"""Re-running the user's code changes nothing the user computes (R53).

The at-step probe (probe.py, through diagnose.py) and the Replay action (replay.py,
replay_run.py) run the model's forward once more. A forward of the user's own may count
its calls, append to a global list, draw from ``random``, numpy or its own
``torch.Generator``, reassign a buffer or change its input in place: a re-run works on a
copy of the batch and puts back what it changed (rerun.py), and code of the user's is
re-run only on a click whose result says so. A model made of ``torch.nn`` modules only is
still probed at the step, on a copy of its batch.
"""

from __future__ import annotations

import json
import random
import textwrap
import weakref
from typing import Any

import numpy as np
import torch
from grads_support import session
from kernel_client import KernelDriver
from torch import nn

from jupyterlab_torchdbg.kernel.grads.bad_step import BadStep, KeptCall
from jupyterlab_torchdbg.kernel.grads.probe import ForwardProbe
from jupyterlab_torchdbg.kernel.grads.replay import Replayer
from jupyterlab_torchdbg.kernel.grads.rerun import user_code

SIDE: list[int] = []
GEN = torch.Generator().manual_seed(3)


class SideEffects(nn.Module):
    """Every side effect of the issue in one forward; sqrt at 0 makes backward NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4, bias=False)
        self.register_buffer("ema", torch.zeros(4))
        self.plain = torch.zeros(4)  # a tensor attribute, not a registered buffer
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        SIDE.append(1)
        noise = random.random() + float(np.random.rand()) + float(torch.rand(1, generator=GEN))
        self.ema = 0.9 * self.ema + 0.1 * x.mean(0)
        self.plain = self.plain + noise
        x.div_(2)
        return torch.sqrt(self.fc(x).pow(2).sum(-1)).mean()


class Host:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def count_error(self, site: str) -> None:
        self.errors.append(site)

    def others_running(self) -> bool:
        return False


def rng_states() -> tuple[Any, ...]:
    return random.getstate(), np.random.get_state()[1].copy(), GEN.get_state()


def same_rngs(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return a[0] == b[0] and np.array_equal(a[1], b[1]) and torch.equal(a[2], b[2])


def test_r53_a_replay_leaves_the_rngs_generators_attributes_and_batch_as_they_were() -> None:
    torch.manual_seed(0)
    model = SideEffects()
    x = torch.zeros(8, 4)  # the row of zeros: sqrt'(0) = inf, the gradient NaN
    x[1:] = torch.randn(7, 4)
    batch = x.clone()
    rep = Replayer(Host())  # type: ignore[arg-type]
    rep.capture(
        BadStep("opt", 5, None, [("model", weakref.ref(model))], {"model": KeptCall((x,), {})}, [])
    )
    before = rng_states()
    ema, plain, calls, side = model.ema, model.plain, model.calls, len(SIDE)
    res = rep.run(None)
    assert res["backward_op"] == "SqrtBackward0", res  # it ran, and found the NaN
    assert same_rngs(rng_states(), before)
    assert model.ema is ema and torch.equal(ema, torch.zeros(4))
    assert model.plain is plain and torch.equal(plain, torch.zeros(4))
    # the list of the forward's module it appended to is put back too
    assert model.calls == calls and len(SIDE) == side
    assert torch.equal(x, batch)  # x.div_(2) halved a copy
    msg = res["message"]
    assert "Re-ran model forward and backward once, on a copy of step 5's batch" in msg, msg
    assert "Code in SideEffects.forward ran once more" in msg, msg
    assert "other side effects (files) are not undone" in msg


def test_r53_the_probe_runs_on_a_copy_and_puts_back_what_the_forward_changed() -> None:
    torch.manual_seed(0)
    model = SideEffects()
    x = torch.randn(8, 4)
    batch = x.clone()
    ns: dict[str, Any] = {"SIDE": SIDE, "GEN": GEN}  # as the notebook's namespace
    side = list(SIDE)
    ema = model.ema
    probe = ForwardProbe("opt", 5, [("model", model)])
    before = rng_states()
    probe.run([KeptCall((x,), {})], [ns])
    assert same_rngs(rng_states(), before)
    assert model.calls == 0 and model.ema is ema and model._buffers["ema"] is ema
    assert torch.equal(ema, torch.zeros(4)) and torch.equal(x, batch)
    assert SIDE == side  # a list of the namespace the forward appended to: put back
    assert probe.ran and probe.left == []
    probe.remove()


def test_r53_only_torch_nn_forwards_run_without_a_click() -> None:
    plain = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    assert user_code([plain]) is None
    assert user_code([nn.Sequential(nn.Linear(4, 4), SideEffects())]) == "SideEffects.forward"
    custom = nn.Linear(4, 4)
    custom.forward = lambda x: x  # type: ignore[method-assign]
    assert user_code([custom]) == "the forward set on the model (Linear)"
    handle = plain[2].register_forward_hook(lambda m, i, o: SIDE.append(0))
    assert (user_code([plain]) or "").startswith("a forward hook on 2 (test_r53_only_"), plain
    handle.remove()
    assert user_code([plain]) is None


def test_r53_a_torch_nn_model_is_still_probed_at_the_step_on_a_copy_of_its_batch() -> None:
    """nn.Sequential: the at-step probe runs, names the module (its original diagnosis)
    and says what it re-ran; the user's batch and the RNGs are as they were."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1))
    with torch.no_grad():
        model[0].weight.fill_(1.0)  # 4 inputs of 1e38 overflow float32: +Inf
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    xs = [torch.randn(16, 4) for _ in range(4)]
    xs[2][0] = 1e38
    kept = [x.clone() for x in xs]
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        s.comm.action("set_stride", {"stride": 1})
        for x in xs:
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            if x is xs[2]:
                rng = torch.get_rng_state()
            opt.step()
            if x is xs[2]:
                assert torch.equal(torch.get_rng_state(), rng)  # dropout's draws undone
        s.end_cell()
        (a,) = [a for a in s.comm.alerts() if a["kind"] == "non_finite_cause"]
        assert a["cause"] == "forward" and a["layer"] == "model.0" and a["step"] == 3, a
        assert "turns finite inputs into NaN/Inf" in a["message"]
        assert "re-ran the forward of model on a copy of step 3's batch" in a["message"]
        assert all(torch.equal(x, k) for x, k in zip(xs, kept, strict=True))
        assert not s.ext.errors


REPRO = """
import random, torch, torch.nn as nn, numpy as np
torch.manual_seed(0); random.seed(0); np.random.seed(0)
SIDE = []
G = torch.Generator().manual_seed(1)
class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4, bias=False)
        self.register_buffer("ema", torch.zeros(4))
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        SIDE.append(1)
        random.random(); np.random.rand(); torch.rand(1, generator=G)
        self.ema = 0.9 * self.ema + 0.1 * x.mean(0)
        x.div_(2)
        return torch.sqrt(self.fc(x).pow(2).sum(-1)).mean()  # a zero row: NaN gradient
model = Counting()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
"""

LOOP = """
ema = torch.zeros(4)
for i in range(1, 13):
    x = torch.randn(8, 4)
    if i == 5:
        x[0] = 0.0
        x5 = x
    ema = 0.9 * ema + 0.1 * x.mean(0)
    opt.zero_grad()
    model(x).backward()
    opt.step()
x5_after = x5.clone()
before = (model.calls, len(SIDE))
"""


async def test_r53_the_issue_repro_a_replay_changes_nothing_the_user_computes(
    loaded: KernelDriver,
) -> None:
    """The issue: a forward counting its calls, appending to a global list, drawing from
    random, numpy and its own generator, reassigning a buffer and halving its input in
    place; a NaN gradient at step 5, 12 steps, one Replay. The automatic probe does not
    run it (its alert says so); the Replay does, once, and leaves every one as it was."""
    comm_id = await loaded.open_comm()
    await loaded.run(textwrap.dedent(REPRO))
    await loaded.run(textwrap.dedent(LOOP))
    await loaded.run("rng0 = (random.getstate(), np.random.get_state()[1].copy(), G.get_state())")
    await loaded.pump_until(
        lambda: any(
            a["kind"] == "non_finite_cause"
            for m in loaded.messages("alert", comm_id)
            for a in m.data["alerts"]
        ),
        timeout=30,
    )
    (cause,) = [
        a
        for m in loaded.messages("alert", comm_id)
        for a in m.data["alerts"]
        if a["kind"] == "non_finite_cause"
    ]
    assert cause["step"] == 5, cause
    reply = await loaded.action(comm_id, "replay_step", {}, timeout=60)
    assert reply["method"] == "ack", reply
    res = reply["result"]
    assert res["step"] == 5 and res["backward_op"] == "SqrtBackward0", res
    out = await loaded.run(
        textwrap.dedent(
            """
            import json
            same_rng = (
                random.getstate() == rng0[0]
                and bool((np.random.get_state()[1] == rng0[1]).all())
                and torch.equal(G.get_state(), rng0[2])
            )
            print(json.dumps({
                "before": before, "calls": model.calls, "side": len(SIDE), "rng": same_rng,
                "ema": torch.equal(model.ema, ema), "batch": torch.equal(x5, x5_after),
            }))
            """
        )
    )
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["before"] == [12, 12], facts  # the automatic probe did not run it
    assert facts["calls"] == 12 and facts["side"] == 12, facts  # nor did the Replay count
    assert facts["rng"] and facts["ema"] and facts["batch"], facts
    # what was and was not re-run, said (the alert, then the Replay's result)
    msg = cause["message"]
    assert "the forward was not re-run: code in Counting.forward may have side effects" in msg
    assert "Replay re-runs your forward once, on a click" in msg, msg
    assert "Code in Counting.forward ran once more" in res["message"], res["message"]


def test_r53_weights_already_non_finite_are_named_without_re_running_the_users_forward() -> None:
    """A model of the user's own: its forward is not re-run at the step, but its weights
    are read (no code of the user's runs for that) and named when already NaN/Inf."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), Counted(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        s.comm.action("set_stride", {"stride": 1})
        for i in range(1, 5):
            if i == 3:
                with torch.no_grad():
                    model[2].weight[0, 0] = float("inf")  # code that set them
            opt.zero_grad()
            model(torch.randn(16, 4)).pow(2).mean().backward()
            opt.step()
        s.end_cell()
        (a,) = [a for a in s.comm.alerts() if a["kind"] == "non_finite_cause"]
        assert a["cause"] == "weights" and a["layer"] == "model.2" and a["step"] == 3, a
        assert "the forward was not re-run: code in Counted.forward" in a["message"]
        assert model[1].calls == 4  # the user's four steps, no more
        assert not s.ext.errors


class Counted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.tanh(x)
