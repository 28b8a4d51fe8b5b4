"""Only checked facts about a non-finite step, and a skip that leaves no trace (R47, R48).

Real kernels, cells as a user types them. The loss is whatever ``backward()`` was called
on: a custom loss module that is not a ``_Loss`` subclass, an expression written in the
cell, a model's own ``.loss``. Each NaN here is deterministic (a zero in a mask the batch
carries), so a replay that runs the user's loss must reproduce it, and one that cannot run
it must say so, never blame randomness. A BatchNorm model trained on a NaN batch with
skipping on must come out as if the batch never ran, and a run whose every step is skipped
from the first must get the cause named, a replay, and no learning-rate advice.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

from kernel_client import KernelDriver

BAD = 5  # the step whose batch holds the zero that makes log(0)

MODEL = """
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
def batch(i):
    g = torch.Generator().manual_seed(i)
    x, y = torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g)
    keep = torch.ones(16)
    if i == {bad}:
        keep[3] = 0.0  # p * 0 = 0: log(0) = -inf, the loss +Inf, the gradients NaN
    return x, y, keep
"""

LOOP = """
for i in range(1, 9):
    x, y, keep = batch(i)
    opt.zero_grad()
    {loss}
    loss.backward()
    opt.step()
"""


def cell(template: str, **kw: Any) -> str:
    return textwrap.dedent(template).format(bad=BAD, **kw)


async def alerts_of(k: KernelDriver, comm_id: str, kind: str) -> list[dict[str, Any]]:
    """The ``kind`` alerts this comm received (live ones, not snapshot replays)."""
    return [
        a
        for m in k.messages("alert", comm_id)
        if not m.data.get("replay")
        for a in m.data["alerts"]
        if a["kind"] == kind
    ]


async def cause_of(k: KernelDriver, comm_id: str) -> dict[str, Any]:
    await k.pump_until(lambda: any(_causes(k, comm_id)), timeout=30)
    found = _causes(k, comm_id)
    assert len(found) == 1, found
    return found[0]


def _causes(k: KernelDriver, comm_id: str) -> list[dict[str, Any]]:
    return [
        a
        for m in k.messages("alert", comm_id)
        if not m.data.get("replay")
        for a in m.data["alerts"]
        if a["kind"] == "non_finite_cause"
    ]


async def replay(k: KernelDriver, comm_id: str) -> dict[str, Any]:
    reply = await k.action(comm_id, "replay_step", {}, timeout=60)
    assert reply["method"] == "ack", reply
    result: dict[str, Any] = reply["result"]
    return result


def never_blames_randomness(message: str) -> None:
    for word in ("random", "dropout", "data race"):
        assert word not in message.lower(), message


async def test_r47_a_custom_loss_modules_log0_is_the_non_finite_loss_and_replays(
    loaded: KernelDriver,
) -> None:
    """The reported case: a NaN from log(0) inside a custom loss ``nn.Module`` (not a
    ``_Loss`` subclass) was called "every module output is finite ... and the loss is
    finite", and the replay said it "does not reproduce: dropout or other randomness"."""
    comm_id = await loaded.open_comm()
    await loaded.run(
        cell(MODEL)
        + textwrap.dedent(
            """
            class ProbLoss(nn.Module):
                def forward(self, logits, target, keep):
                    p = logits.softmax(-1).gather(1, target[:, None]).squeeze(1) * keep
                    return -torch.log(p).mean()
            criterion = ProbLoss()
            """
        )
    )
    await loaded.run(cell(LOOP, loss="loss = criterion(model(x), y, keep)"))
    a = await cause_of(loaded, comm_id)
    assert a["step"] == BAD and a["cause"] == "loss" and a["layer"] == "criterion", a
    msg = a["message"]
    assert "the loss `loss` (criterion(...)) is +Inf" in msg, msg
    assert "loss is finite" not in msg and "backward made" not in msg
    # the module outputs are said finite of the re-run, which says what it re-ran (R53)
    assert f"re-ran the forward of model on a copy of step {BAD}'s batch" in msg, msg
    res = await replay(loaded, comm_id)
    assert res["loss_root"] == "loss_module:criterion" and res["user_loss"] == "same", res
    assert res["reproduces"] is True and res["cause"] == "forward", res
    assert res["output"] == "loss" and res["forward_op"] == "log", res
    never_blames_randomness(res["message"])


async def test_r47_a_loss_written_as_an_expression_is_read_at_the_step_not_replayed(
    loaded: KernelDriver,
) -> None:
    """``-torch.log(p).mean()`` in the cell: the diagnosis reads the value backward()
    was called on; the replay cannot re-run it and says so, with the value it read."""
    comm_id = await loaded.open_comm()
    await loaded.run(cell(MODEL))
    expr = "loss = -torch.log(model(x).softmax(-1).gather(1, y[:, None]).squeeze(1) * keep).mean()"
    await loaded.run(cell(LOOP, loss=expr))
    a = await cause_of(loaded, comm_id)
    assert a["step"] == BAD and a["cause"] == "loss" and a["layer"] is None, a
    assert "the loss `loss` (computed outside the model" in a["message"], a["message"]
    assert "is +Inf at this step" in a["message"]
    res = await replay(loaded, comm_id)
    assert res["user_loss"] == "not_rerun" and res["loss_root"] == "surrogate", res
    assert res["finite"] and res["reproduces"] is None, res
    msg = res["message"]
    assert "cannot re-run your loss" in msg and "was not checked" in msg, msg
    assert "+Inf (read at the step)" in msg and "does not reproduce" not in msg
    never_blames_randomness(msg)
    # the panel's alert of the replay carries the same result and a fitting remedy
    await loaded.pump_until(
        lambda: any(
            a["kind"] == "non_finite_replay"
            for m in loaded.messages("alert", comm_id)
            for a in m.data["alerts"]
        )
    )
    (alert,) = await alerts_of(loaded, comm_id, "non_finite_replay")
    assert alert["replay"]["reproduces"] is None and "could not run your loss" in alert["remedy"]


async def test_r47_a_models_own_loss_output_is_named_the_loss_and_replays(
    loaded: KernelDriver,
) -> None:
    """``out = model(input_ids=..., labels=...); out.loss.backward()`` (a Hugging Face
    style output: a dict with attribute access): the loss is the model's own."""
    comm_id = await loaded.open_comm()
    await loaded.run(
        textwrap.dedent(
            """
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class Output(dict):  # like transformers' ModelOutput
                __getattr__ = dict.__getitem__
            class LM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.emb, self.head = nn.Embedding(20, 8), nn.Linear(8, 20)
                def forward(self, input_ids, labels=None, keep=None):
                    logits = self.head(self.emb(input_ids))
                    out = Output(logits=logits)
                    if labels is not None:
                        p = logits.softmax(-1).gather(-1, labels[..., None]).squeeze(-1)
                        out["loss"] = -torch.log(p * keep).mean()
                    return out
            model = LM()
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            """
        )
    )
    await loaded.run(
        textwrap.dedent(
            f"""
            for i in range(1, 9):
                ids = torch.randint(0, 20, (4, 6))
                keep = torch.ones(4, 6)
                if i == {BAD}:
                    keep[2, 1] = 0.0
                out = model(input_ids=ids, labels=ids, keep=keep)
                opt.zero_grad()
                out.loss.backward()
                opt.step()
            """
        )
    )
    a = await cause_of(loaded, comm_id)
    assert a["step"] == BAD and a["cause"] == "loss" and a["layer"] == "model", a
    assert "model's own loss" in a["message"] and "+Inf" in a["message"], a["message"]
    assert "loss is finite" not in a["message"]
    res = await replay(loaded, comm_id)
    assert res["loss_root"] == "model" and res["user_loss"] == "same", res
    assert res["reproduces"] is True and res["cause"] == "forward" and res["forward_op"] == "log"
    never_blames_randomness(res["message"])


async def test_r48_a_skipped_nan_batch_leaves_batchnorm_statistics_as_before(
    loaded: KernelDriver,
) -> None:
    """With a NaN batch and BatchNorm, a skipped step used to leave running_mean /
    running_var NaN (and model.eval() outputting NaN) while saying the weights were
    unchanged."""
    comm_id = await loaded.open_comm()
    await loaded.run(
        textwrap.dedent(
            """
            import torch, torch.nn as nn
            from jupyterlab_torchdbg import watch
            torch.manual_seed(0)
            model = nn.Sequential(
                nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8),
                nn.BatchNorm1d(8, momentum=None), nn.ReLU(), nn.Linear(8, 1),
            )
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            watch(model, opt, skip_nonfinite=True)
            """
        )
    )
    out = await loaded.run(
        textwrap.dedent(
            """
            stats = lambda: {k: v.clone() for k, v in model.state_dict().items()
                             if 'running' in k or 'num_batches' in k}
            for i in range(1, 9):
                x = torch.randn(16, 4)
                if i == 4:
                    x[5, 2] = float('nan')
                    before = stats()
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
                if i == 4:
                    same = {k: torch.equal(v, before[k]) for k, v in stats().items()}
            model.eval()
            print(json.dumps({
                'same': same,
                'eval_finite': bool(torch.isfinite(model(torch.randn(8, 4))).all()),
                'stats_finite': all(bool(torch.isfinite(v.float()).all())
                                    for v in stats().values()),
            }))
            """
        ).replace("print(json", "import json\nprint(json")
    )
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["same"] and all(facts["same"].values()), facts
    assert len(facts["same"]) == 6  # mean, var and the count of both layers
    assert facts["eval_finite"] and facts["stats_finite"], facts
    a = await cause_of(loaded, comm_id)
    assert a["cause"] == "input" and a["step"] == 4, a
    msg = a["message"]
    assert "weights and optimizer state unchanged" in msg, msg
    assert "running statistics of 2 normalisation layers were put back" in msg, msg
    assert "Not restored" not in msg and "holding NaN/Inf" not in msg
    track = loaded.messages("grads", comm_id)[-1].data["tracks"][0]
    assert track["skipped_nonfinite"] == 1


async def test_r48_every_step_skipped_from_the_first_is_diagnosed_and_replayable(
    loaded: KernelDriver,
) -> None:
    """Skip on from the panel, a model whose backward makes NaN at every step from the
    first: the cause is named at step 1 (its batch was kept from the cell's start), the
    replay has a step to run, and no remedy says to lower a learning rate that has not
    acted yet."""
    comm_id = await loaded.open_comm()
    await loaded.run(
        textwrap.dedent(
            """
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class SqrtAtZero(nn.Module):
                def forward(self, x):
                    return x + torch.sqrt(x * 0.0)  # finite forward; sqrt'(0) = inf: NaN
            model = nn.Sequential(nn.Linear(4, 8), SqrtAtZero(), nn.Linear(8, 1))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            from jupyterlab_torchdbg import watch
            watch(model, rerun_forward=True)  # SqrtAtZero is the user's code (R53)
            """
        )
    )
    assert (await loaded.action(comm_id, "skip_nonfinite", {"on": True}))["method"] == "ack"
    await loaded.run(
        textwrap.dedent(
            """
            w0 = [p.detach().clone() for p in model.parameters()]
            for i in range(6):
                opt.zero_grad()
                loss = model(torch.randn(16, 4)).pow(2).mean()
                loss.backward()
                opt.step()
            assert all(torch.equal(p, q) for p, q in zip(model.parameters(), w0))
            """
        )
    )
    a = await cause_of(loaded, comm_id)
    assert a["step"] == 1 and a["cause"] == "backward", a
    assert "saw no update of this optimizer applied before this step" in a["message"]
    assert "the loss `loss`" in a["message"] and "is finite" in a["message"]
    assert "learning rate" not in a["remedy"], a["remedy"]
    everything = [a for m in loaded.messages("alert", comm_id) for a in m.data["alerts"]]
    assert not [x for x in everything if x["kind"] == "non_finite"], everything
    assert all("learning rate" not in x["remedy"] for x in everything), everything
    assert loaded.messages("grads", comm_id)[-1].data["replayable"] == {
        "track": "opt",
        "step": 1,
    }
    res = await replay(loaded, comm_id)
    assert res["step"] == 1 and res["backward_op"] == "SqrtBackward0", res
    assert res["reproduces"] is True and res["user_loss"] == "not_rerun"
    track = loaded.messages("grads", comm_id)[-1].data["tracks"][0]
    assert track["skipped_nonfinite"] == 6
