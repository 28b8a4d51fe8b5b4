"""What a skipped step left as it was, and what it did not (R48).

Skipping a non-finite step (skip.py) hides the gradients from the optimizer; the forward
pass has already updated the normalisation running statistics, which the keeper copied
before it (norm_stats.py, inputs.py) and ``restore`` puts back. ``SkipFacts`` is what the
alert then says, each part only as far as it was checked: the optimizer's own behaviour
(torch's optimizers leave parameters without gradients untouched; another's was not
checked), the statistics put back, those that could not be (no copy from before the
batch), and other buffers that hold NaN/Inf now (not snapshotted: read once per alert).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..watches import watches
from .alerts import Alert

if TYPE_CHECKING:
    from torch.nn import Module

    from .inputs import InputKeeper
    from .norm_stats import NormShadow
    from .track import Track

SKIP_REMEDY = (
    "Skipped steps train on nothing: find the cause (the first alert of this run) and fix "
    "the data or the model; turn skip_nonfinite off to let such steps through."
)

#: (root name, root module, its NormShadow or None)
Shadows = list[tuple[str, "Module", "NormShadow | None"]]


class SkipFacts:
    """What a skipped step left as it was, and what it did not (R48)."""

    def __init__(self, optimizer: str) -> None:
        self.optimizer = optimizer
        #: The optimizer is one of torch's that leaves parameters without .grad alone.
        self.torch_optimizer = False
        self.layers = 0
        self.restored = 0
        #: Running statistics updated by the batch and not put back.
        self.missed: list[str] = []
        #: Other buffers of the roots that hold NaN/Inf now (not snapshotted).
        self.bad_buffers: list[str] = []
        #: The step is put back from a copy taken before it (closure_skip.py).
        self.copied = False

    def text(self) -> str:
        if self.copied:
            out = (
                "The optimizer step was skipped: weights and optimizer state are put back "
                f"from a copy taken before the step ({self.optimizer or 'the optimizer'} "
                "evaluates its closure again within a step)."
            )
        elif self.torch_optimizer:
            out = (
                f"The optimizer step was skipped: weights and optimizer state unchanged "
                f"({self.optimizer} leaves parameters without gradients untouched)."
            )
        else:
            out = (
                f"The optimizer step was skipped: its gradients were hidden from "
                f"{self.optimizer or 'the optimizer'}.step(); whether it leaves parameters "
                "without gradients untouched was not checked."
            )
        if self.layers:
            out += (
                f" The running statistics of {self.layers} normalisation "
                f"layer{'s' if self.layers != 1 else ''} were put back as before this batch."
            )
        if self.missed:
            names = ", ".join(self.missed[:3]) + (" ..." if len(self.missed) > 3 else "")
            out += f" Not restored (no copy from before this batch's forward): {names}."
        if self.bad_buffers:
            names = ", ".join(self.bad_buffers[:3]) + (" ..." if len(self.bad_buffers) > 3 else "")
            out += f" Buffers holding NaN/Inf now (not snapshotted): {names}."
        return out


def skips_without_grad(optimizer: object) -> bool:
    """torch's own optimizers (not LBFGS, whose closure recomputes the gradients) skip
    every parameter whose ``.grad`` is None."""
    if optimizer is None:
        return False
    cls = type(optimizer)
    return cls.__module__.startswith("torch.optim.") and cls.__name__ != "LBFGS"


def nonfinite_buffers(name: str, module: Module) -> list[str]:
    """The root's floating buffers that hold NaN/Inf (one reduction each, per skip alert)."""
    import torch

    out: list[str] = []
    for i, (bname, b) in enumerate(module.named_buffers()):
        if i >= 4096 or len(out) >= 8:
            break
        if b.is_floating_point() and b.layout == torch.strided and not b.is_meta:
            if b.numel() and not bool(torch.isfinite(b).all()):
                out.append(f"{name}.{bname}")
    return out


def restore(optimizer: object, shadows: Shadows, copied: bool = False) -> SkipFacts:
    """Put back the running statistics the skipped batch updated; what was done
    (``copied``: the step itself is put back from a copy, closure_skip.py)."""
    from .norm_stats import norm_buffers

    facts = SkipFacts(type(optimizer).__name__ if optimizer is not None else "")
    facts.torch_optimizer = skips_without_grad(optimizer)
    facts.copied = copied
    for name, module, shadow in shadows:
        if shadow is not None:
            done, missed = shadow.restore()
            facts.layers += shadow.layers if done else 0
            facts.restored += len(done)
            facts.missed += [f"{name}.{n}" for n in missed]
        else:
            facts.missed += [f"{name}.{n}" for n, m, _, _ in norm_buffers(module) if m.training]
        facts.bad_buffers += nonfinite_buffers(name, module)
    return facts


def rearm(
    keeper: InputKeeper, shadows: Shadows, wrapper_of: Callable[[Module], Module | None]
) -> None:
    """Every step of a skipping track: the next forward copies the statistics (a track
    that just began skipping gets its copies made here)."""
    for _, module, shadow in shadows:
        if shadow is None:
            keeper.want_norms(module, wrapper_of(module))
        else:
            shadow.rearm()


def updates_before(optimizer: object, seen_applied: int) -> str | None:
    """Whether this optimizer applied any update before this step, as far as checked:
    "none" (its state holds no step: torch's stateful optimizers make state at their
    first update), "none_seen" (the tool saw none, and its state cannot tell: SGD without
    momentum, a custom optimizer, a loop without one), or None (it has updated)."""
    if seen_applied:
        return None
    state = getattr(optimizer, "state", None)
    cls = type(optimizer)
    if not isinstance(state, dict) or not cls.__module__.startswith("torch.optim."):
        return "none_seen"
    entries = [st for st in list(state.values()) if isinstance(st, dict) and st]
    if not entries:
        stateless = cls.__name__ == "SGD" and all(
            not g.get("momentum") for g in getattr(optimizer, "param_groups", [])
        )
        return "none_seen" if stateless else "none"
    steps = [st["step"] for st in entries if "step" in st]
    if steps and all(float(s) == 0 for s in steps):
        return "none"  # Adagrad makes its state (step 0) before any update
    return None


def skip_alert(track: Track, kept: SkipFacts | None, later: bool = False) -> Alert:
    """The first skipped step's alert (``later``: found at a later evaluation of the
    step's closure, after the optimizer had moved the weights within the step)."""
    facts = f" {kept.text()}" if kept is not None else ""
    what = (
        "a later evaluation of its closure within the step gave NaN/Inf gradients"
        if later
        else "had a NaN/Inf gradient"
    )
    msg = (
        f"Skipping non-finite steps: step {track.step} of {track.name} {what} and was "
        f"skipped.{facts} Further ones are skipped and counted in the gradients panel."
    )
    return Alert("non_finite_skipped", "warning", track.step, None, msg, SKIP_REMEDY, track.name)


def watched_skip(track: Track) -> bool:
    """A ``watch(model, opt, skip_nonfinite=True)`` covers this track's parameters."""
    plan, opt = track.plan, track.opt_ref()
    active = [w for w in watches()[1] if w.skip_nonfinite]
    if not active or plan is None or opt is None:
        return False
    ids = {id(p) for p in plan.params}
    for w in active:
        model = w.model
        if model is None or (w.optimizer is not None and w.optimizer is not opt):
            continue
        try:
            if any(id(p) in ids for p in model.parameters()):
                return True
        except Exception:
            continue
    return False
