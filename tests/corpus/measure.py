"""Measure the gradient-alarm figures across model families (issue #22): each healthy and
each failing run of the corpus, trained plainly (no extension), with its per-step total
gradient norm as the monitor reads it (after the loop's own clip), the norm before that
clip, the weights' norm, the loss and the learning rate; then, per run, the figures the
alarm thresholds are set from (the longest stretch above x10 the baseline, the weights'
growth over the first five updates and over any one update) and the alarms the defaults
raise on it (the rows fed as the monitor feeds them).

    python tests/corpus/measure.py            # train every run (a few minutes), print
    python tests/corpus/measure.py --cached   # print from the last recording

The figures are quoted in jupyterlab_torchdbg/kernel/grads/divergence.py.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from corpus import families as fam
from corpus import models as mod

CACHE = Path("/tmp/torchdbg-corpus-measure.pt")


@dataclass
class Spec:
    name: str
    healthy: bool
    build: Callable[[], nn.Module]
    opt: Callable[[nn.Module], torch.optim.Optimizer | None]
    batches: Callable[[], Iterator[Any]]
    loss: Callable[[nn.Module, Any, Any], tuple[torch.Tensor, Any]]
    steps: int
    lr: Callable[[int], float] | None = None
    clip: float | None = None
    #: the learning rate of a loop without torch.optim (``p.data.add_(p.grad, alpha=-lr)``)
    by_hand: float | None = None


def _plain(fn: Callable[[nn.Module, Any], torch.Tensor]) -> Any:
    return lambda m, b, state: (fn(m, b), state)


def word_lm_loss(m: nn.Module, b: Any, hidden: Any) -> tuple[torch.Tensor, Any]:
    data, targets = b
    if hidden is None:
        hidden = m.init_hidden(data.size(1))  # type: ignore[operator]
    hidden = fam.repackage_hidden(hidden)
    out, hidden = m(data, hidden)
    return F.nll_loss(out, targets), hidden


def gpt2_loss(m: nn.Module, b: Any) -> torch.Tensor:
    return m(**b).loss


def lm_loss(m: nn.Module, b: Any) -> torch.Tensor:
    return m(*b)[1]


def ce(m: nn.Module, b: Any) -> torch.Tensor:
    return F.cross_entropy(m(b[0]), b[1])


def focal(m: nn.Module, b: Any) -> torch.Tensor:
    return fam.FocalLoss()(m(b[0]), b[1])


def bump(at: int, lo: float, hi: float) -> Callable[[int], float]:
    return lambda step: lo if step <= at else hi


def warm(peak: float, warmup: int, total: int) -> Callable[[int], float]:
    return lambda step: mod.warmup_lr(step - 1, peak, warmup, total)


def adamw(lr: float, wd: float = 0.01) -> Callable[[nn.Module], torch.optim.Optimizer]:
    return lambda m: torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=wd)


def adam(lr: float) -> Callable[[nn.Module], torch.optim.Optimizer]:
    return lambda m: torch.optim.Adam(m.parameters(), lr=lr)


def sgd(lr: float, momentum: float = 0.0) -> Callable[[nn.Module], torch.optim.Optimizer]:
    return lambda m: torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum)


_converged: dict[int, dict[str, torch.Tensor]] = {}


def converged(seed: int) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        if seed not in _converged:
            _converged[seed] = fam.converged_classifier(seed).state_dict()
        m = fam.build_classifier(seed)
        m.load_state_dict(_converged[seed])
        return m

    return build


def specs() -> list[Spec]:
    wl = lambda s=0: lambda: fam.word_lm_batches(seed=s)  # noqa: E731
    blobs = lambda s, spread=1.0: lambda: fam.blob_batches(spread=spread, seed=s)  # noqa: E731
    conv_data = lambda s: lambda: fam.blob_batches(spread=0.5, seed=s + 100)  # noqa: E731
    return [
        # --- healthy ---
        Spec(
            "word-lm by hand lr20 clip.25",
            True,
            fam.build_word_lm,
            lambda m: None,
            wl(),
            word_lm_loss,
            600,
            clip=0.25,
            by_hand=20.0,
        ),
        Spec(
            "word-lm by hand lr20 clip.25 seed1",
            True,
            lambda: fam.build_word_lm(1),
            lambda m: None,
            wl(1),
            word_lm_loss,
            600,
            clip=0.25,
            by_hand=20.0,
        ),
        Spec(
            "word-lm SGD lr20 clip.25",
            True,
            fam.build_word_lm,
            sgd(20.0),
            wl(),
            word_lm_loss,
            600,
            clip=0.25,
        ),
        # lr 20 without the example's clip: the norm x200 at step 5, the weights x40 by
        # step 6, the loss 5 -> 29 (it recovers later): a real explosion, not a healthy run
        Spec(
            "word-lm by hand lr20 no clip",
            False,
            fam.build_word_lm,
            lambda m: None,
            wl(),
            word_lm_loss,
            600,
            by_hand=20.0,
        ),
        Spec(
            "gpt2 adamw 6e-4 warmup",
            True,
            fam.build_gpt2,
            adamw(6e-4, 0.1),
            fam.gpt2_batches,
            _plain(gpt2_loss),
            400,
            lr=warm(6e-4, 40, 400),
        ),
        Spec(
            "gpt2 adamw 3e-3 no warmup",
            True,
            fam.build_gpt2,
            adamw(3e-3),
            fam.gpt2_batches,
            _plain(gpt2_loss),
            400,
        ),
        Spec(
            "gpt2 adamw 1e-2 no warmup",
            True,
            lambda: fam.build_gpt2(1),
            adamw(1e-2),
            fam.gpt2_batches,
            _plain(gpt2_loss),
            400,
        ),
        Spec(
            "gpt-style adamw 3e-3 warmup",
            True,
            mod.build_gpt,
            adamw(3e-3, 0.1),
            lambda: mod.token_batches(seed=1),
            _plain(lm_loss),
            400,
            lr=warm(3e-3, 30, 400),
        ),
        Spec(
            "encoder adamw 1e-3",
            True,
            fam.build_encoder,
            adamw(1e-3),
            fam.sequence_class_batches,
            _plain(ce),
            400,
        ),
        Spec(
            "encoder adam 1e-4 warmup",
            True,
            fam.build_encoder,
            adam(1e-4),
            fam.sequence_class_batches,
            _plain(ce),
            400,
            lr=warm(1e-4, 50, 400),
        ),
        Spec(
            "mlp classifier adam 1e-3",
            True,
            fam.build_classifier,
            adam(1e-3),
            blobs(1),
            _plain(ce),
            600,
        ),
        Spec(
            "mlp focal-loss sgd 0.05",
            True,
            fam.build_classifier,
            sgd(0.05, 0.9),
            blobs(2, 2.0),
            _plain(focal),
            600,
        ),
        Spec(
            "cnn bn sgd 0.1", True, mod.build_cnn, sgd(0.1, 0.9), mod.image_batches, _plain(ce), 400
        ),
        Spec(
            "cnn bn batch 2",
            True,
            lambda: mod.build_cnn(1),
            sgd(0.05, 0.9),
            lambda: mod.image_batches(batch=2, seed=1),
            _plain(ce),
            400,
        ),
        Spec(
            "converged re-trained adam 1e-3",
            True,
            converged(0),
            adam(1e-3),
            conv_data(0),
            _plain(ce),
            600,
        ),
        Spec(
            "converged re-trained sgd 0.1",
            True,
            converged(1),
            sgd(0.1, 0.9),
            conv_data(1),
            _plain(ce),
            600,
        ),
        Spec(
            "converged re-trained adamw 1e-4",
            True,
            converged(2),
            adamw(1e-4),
            conv_data(2),
            _plain(ce),
            600,
        ),
        Spec(
            "regression batch 1 sgd",
            True,
            mod.build_mlp,
            sgd(1e-2),
            lambda: mod.regression_batches(batch=1, seed=3),
            _plain(lambda m, b: F.mse_loss(m(b[0]), b[1])),
            600,
        ),
        Spec(
            "regression x1000 targets adam",
            True,
            lambda: mod.build_mlp(1),
            adam(1e-3),
            lambda: mod.regression_batches(scale=1e3),
            _plain(lambda m, b: F.mse_loss(m(b[0]), b[1])),
            600,
        ),
        Spec(
            "lstm adam 1e-3",
            True,
            mod.build_lstm_lm,
            adam(1e-3),
            lambda: mod.token_batches(seed=2),
            _plain(lambda m, b: m.loss(*b)),
            400,
        ),
        Spec(
            "mlp zero-init head adam 1e-3",
            True,
            fam.build_zero_head,
            adam(1e-3),
            blobs(3),
            _plain(ce),
            400,
        ),
        Spec(
            "lora adapters adamw 1e-3", True, fam.build_lora, adamw(1e-3), blobs(4), _plain(ce), 400
        ),
        # --- failing ---
        Spec(
            "gpt2 adamw lr 5",
            False,
            fam.build_gpt2,
            adamw(5.0),
            fam.gpt2_batches,
            _plain(gpt2_loss),
            60,
        ),
        Spec(
            "gpt2 adamw lr 1",
            False,
            fam.build_gpt2,
            adamw(1.0),
            fam.gpt2_batches,
            _plain(gpt2_loss),
            60,
        ),
        Spec(
            "gpt2 adamw lr 0.3",
            False,
            lambda: fam.build_gpt2(1),
            adamw(0.3),
            fam.gpt2_batches,
            _plain(gpt2_loss),
            60,
        ),
        Spec(
            "gpt2 sgd lr 1e3",
            False,
            fam.build_gpt2,
            sgd(1e3),
            fam.gpt2_batches,
            _plain(gpt2_loss),
            60,
        ),
        Spec(
            "gpt2 lr bump 6e-4 -> 5 at 100",
            False,
            fam.build_gpt2,
            adamw(6e-4),
            fam.gpt2_batches,
            _plain(gpt2_loss),
            160,
            lr=bump(100, 6e-4, 5.0),
        ),
        Spec(
            "gpt-style adamw lr 10",
            False,
            mod.build_gpt,
            adamw(10.0),
            lambda: mod.token_batches(seed=1),
            _plain(lm_loss),
            60,
        ),
        Spec(
            "encoder adamw lr 5",
            False,
            fam.build_encoder,
            adamw(5.0),
            fam.sequence_class_batches,
            _plain(ce),
            60,
        ),
        Spec(
            "word-lm by hand lr 400 clip.25",
            False,
            fam.build_word_lm,
            lambda m: None,
            wl(),
            word_lm_loss,
            80,
            clip=0.25,
            by_hand=400.0,
        ),
        Spec(
            "word-lm by hand lr 20 -> 2000 at 100 no clip",
            False,
            fam.build_word_lm,
            lambda m: None,
            wl(),
            word_lm_loss,
            160,
            lr=bump(100, 20.0, 2000.0),
            by_hand=20.0,
        ),
        Spec(
            "lstm adam lr 1",
            False,
            mod.build_lstm_lm,
            adam(1.0),
            lambda: mod.token_batches(seed=2),
            _plain(lambda m, b: m.loss(*b)),
            60,
        ),
        Spec(
            "cnn sgd lr bump 0.1 -> 100 at 60",
            False,
            mod.build_cnn,
            sgd(0.1, 0.9),
            mod.image_batches,
            _plain(ce),
            100,
            lr=bump(60, 0.1, 100.0),
        ),
        Spec(
            "mlp classifier sgd lr 1e3",
            False,
            fam.build_classifier,
            sgd(1e3),
            blobs(1),
            _plain(ce),
            60,
        ),
    ]


def total_norm(params: list[torch.Tensor]) -> float:
    sq = [p.grad.detach().double().pow(2).sum() for p in params if p.grad is not None]
    return math.sqrt(float(sum(sq))) if sq else 0.0


def run(spec: Spec) -> dict[str, Any]:
    model = spec.build()
    opt = spec.opt(model)
    params = [p for p in model.parameters() if p.requires_grad]
    batches = spec.batches()
    state: Any = None
    rows: dict[str, list[Any]] = {k: [] for k in ("total", "pre", "weights", "loss", "lr")}
    model.train()
    for step in range(1, spec.steps + 1):
        lr = spec.lr(step) if spec.lr is not None else None
        if lr is not None and opt is not None:
            for g in opt.param_groups:
                g["lr"] = lr
        model.zero_grad()
        loss, state = spec.loss(model, next(batches), state)
        loss.backward()
        rows["pre"].append(total_norm(params))
        if spec.clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), spec.clip)
        rows["total"].append(total_norm(params))
        with torch.no_grad():
            rows["weights"].append(math.sqrt(sum(float(p.double().pow(2).sum()) for p in params)))
        rows["loss"].append(float(loss))
        rows["lr"].append(None if opt is None else max(g["lr"] for g in opt.param_groups))
        if opt is not None:
            opt.step()
        else:
            step_lr = lr if lr is not None else spec.by_hand
            assert step_lr is not None
            for p in model.parameters():
                if p.grad is not None:
                    p.data.add_(p.grad, alpha=-step_lr)
    return rows


def record(only: str | None = None) -> dict[str, dict[str, Any]]:
    torch.set_num_threads(1)
    out: dict[str, dict[str, Any]] = torch.load(CACHE) if only and CACHE.exists() else {}
    for spec in specs():
        if only and only not in spec.name:
            continue
        rows = run(spec)
        out[spec.name] = {"healthy": spec.healthy, **rows}
        print(f"recorded {spec.name}", file=sys.stderr)
    torch.save(out, CACHE)
    return out


def judge(r: dict[str, Any], rows_per_check: int = 8) -> list[tuple[str, int]]:
    """The run's norms through the alarms as the monitor feeds them: rows checked in
    batches, the weights read at the first six steps and then every 50."""
    from jupyterlab_torchdbg.kernel.grads.alarms import Detector, Thresholds

    det = Detector("opt", Thresholds())
    t, w, lrs = r["total"], r["weights"], r["lr"]
    out: list[tuple[str, int]] = []
    for i in range(0, len(t), rows_per_check):
        xs = list(range(i + 1, min(len(t), i + rows_per_check) + 1))
        read = [x for x in xs if x <= 6 or x % 50 == 0]
        if read:
            det.observe_weights([float(x) for x in read], torch.tensor([[w[x - 1]] for x in read]))
        m = torch.tensor([[t[x - 1], t[x - 1]] for x in xs], dtype=torch.float32)
        alerts = det.evaluate([float(x) for x in xs], m, ["model"], lr=lrs[xs[-1] - 1])
        out += [(a.kind, a.step) for a in alerts]
    return out


def streak(t: list[float], factor: float) -> int:
    """Longest run of steps above ``factor`` x the baseline, as the sustained rule keeps
    it (the smallest of the first five, then the median of the last 64 that were not that
    high; no gate: a converged run's jitter counts here, its early level gates it)."""
    window: list[float] = []
    best = run = hot = 0
    for v in t:
        base = None
        if window:
            base = min(window) if len(window) < 5 else statistics.median(window[-64:])
        if base is not None and v > factor * base:
            run, hot = run + 1, hot + 1
            best = max(best, run)
            if hot > 100:
                window.append(v)
        else:
            run = hot = 0
            window.append(v)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cached", action="store_true")
    ap.add_argument("--only", help="record only the runs whose name holds this")
    args = ap.parse_args()
    data = torch.load(CACHE) if args.cached and CACHE.exists() else record(args.only)
    print(f"{'':48s} {'x10 run':>8s} {'w 5 upd':>8s} {'w 1 upd':>8s}  alarms (kind@step)")
    for name, r in data.items():
        t, w = r["total"], r["weights"]
        fives = w[5] / w[0]
        ones = max(w[i + 1] / w[i] for i in range(len(w) - 1) if w[i] > 0)
        alarms = " ".join(f"{k}@{s}" for k, s in judge(r)[:3]) or "-"
        tag = "H" if r["healthy"] else "F"
        print(f"{tag} {name:46s} {streak(t, 10):8d} {fives:8.3g} {ones:8.3g}  {alarms}")


if __name__ == "__main__":
    main()
