"""The loss of a bad step, as far as it was checked (R47).

The loss is what ``backward()`` was called on at this step (backward_root.py: read at the
step, a few values kept). When that was seen, it decides: non-finite -> the loss is the
cause (naming the term of the user's expression whose kept output is non-finite: ``ce +
nll`` -> ``nll``); finite -> with a finite forward re-run, backward made the NaN. When it
was not seen, only positive facts count: a non-finite output of a loss module called on
this batch (inputs.py), a torch loss module re-evaluated on the re-run's output, or the
loss logged with ``log()``; a finite one is never taken for the loss, and the finding
says the loss was not checked (``unchecked``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .backward_root import describe, values_state
from .finding import Finding

if TYPE_CHECKING:
    from ..stream import Stream
    from .bad_step import KeptLoss, KeptRoot


class LossFacts:
    """What is known of this step's loss, checked once."""

    def __init__(
        self,
        root: KeptRoot | None,
        losses: list[KeptLoss],
        logged: float | None,
        after: int,
        ns: Mapping[str, object] | None,
    ) -> None:
        self.root = root
        self.losses = losses
        self.logged = logged
        self.current = [k for k in losses if k.call > after]
        self.ns = ns
        if root is not None:
            self.state, self.value = values_state(root)
        else:
            self.state, self.value = "unseen", None

    def name(self) -> str:
        assert self.root is not None
        return describe(self.root, self.ns)

    def why_unchecked(self) -> str:
        if self.root is not None:
            n = max((math.prod(s) for s in self.root.shapes), default=0)
            return f"backward() was called on a tensor of {n} values, too many to keep"
        return "the tensor backward() was called on at this step was not seen"


def after_forward(
    forward: str,
    ran: bool,
    loss: LossFacts,
    grad_layer: str | None,
    outputs: list[object],
) -> Finding:
    """The forward pass was finite (or could not be re-run): the loss, or backward."""
    where = f" (first in {grad_layer}, nearest the loss)" if grad_layer else ""
    root = loss.root
    if root is not None and loss.state == "non_finite":
        v = loss.value if loss.value is not None else math.nan
        msg = f"{forward}, but the loss {loss.name()} is {spell(v)} at this step"
        # A term of it whose own output (kept at this batch) is non-finite: named; a
        # root model's own loss is its own term.
        finite: list[str] = []
        for kept in loss.current:
            tv = scalar_of(kept.output)
            if kept.name not in root.terms or tv is None:
                continue
            if not math.isfinite(tv):
                if not (root.exact and kept.name == root.source):
                    msg += f": its term {kept.name}(...) is {spell(tv)}"
                return Finding("loss", kept.name, msg)
            finite.append(f"{kept.name}(...)")
        if root.exact or root.kind == "model":
            return Finding("loss", root.source, msg)
        if finite:
            msg += f"; its term {' and '.join(finite)} is finite: the rest of it made it"
        return Finding("loss", None, msg)
    if root is None:
        # What backward() was called on was not seen: a non-finite loss module output
        # of this batch, or the logged loss, is still a checked fact.
        for kept in loss.current:
            kv = scalar_of(kept.output)
            if kv is not None and not math.isfinite(kv):
                msg = f"{forward}, but the loss {kept.name} is {spell(kv)}"
                return Finding("loss", kept.name, msg)
        if not any(k.output is not None for k in loss.current):
            for kept in loss.losses:
                rv = _reevaluate(kept, outputs)
                if rv is not None and not math.isfinite(rv):
                    msg = f"{forward}, but the loss {kept.name} on them is {spell(rv)}"
                    return Finding("loss", kept.name, msg)
        if loss.logged is not None and not math.isfinite(loss.logged):
            msg = f"{forward}, but the loss logged with log() is {spell(loss.logged)}"
            return Finding("loss", None, msg)
    if loss.state == "finite" and ran:
        value = f" ({loss.value:.4g})" if loss.value is not None else ""
        msg = (
            f"{forward}, and the loss {loss.name()} is finite{value}: backward made the "
            f"non-finite gradient{where}"
        )
        return Finding("backward", grad_layer, msg)
    if loss.state == "finite":
        value = f" ({loss.value:.4g})" if loss.value is not None else ""
        msg = (
            f"{forward}; the loss {loss.name()} is finite{value}: the NaN/Inf arises in "
            f"the forward's intermediate values or in backward{where}"
        )
        return Finding("unchecked", grad_layer, msg)
    parts = "the loss or in backward" if ran else "the forward, the loss or backward"
    msg = (
        f"{forward}, but the loss was not checked ({loss.why_unchecked()}): the NaN/Inf "
        f"arises in {parts}{where}"
    )
    return Finding("unchecked", grad_layer, msg)


def _reevaluate(kept: KeptLoss, outputs: list[object]) -> float | None:
    """The loss module on a probed output of the kept input's size, with the kept target."""
    import torch

    from .rerun import restored, user_code

    module = kept.module()
    if module is None or kept.input_shape is None or user_code([module]) is not None:
        return None  # R53: a loss module of the user's own code is not re-run unasked
    numel = math.prod(kept.input_shape)
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.numel() == numel and out.is_floating_point():
            try:
                with torch.no_grad(), restored([module]):
                    return scalar_of(
                        module(out.reshape(kept.input_shape), *kept.rest, **kept.kwargs)
                    )
            except Exception:
                continue
    return None


def scalar_of(value: object) -> float | None:
    import torch

    if isinstance(value, torch.Tensor) and value.numel() >= 1 and value.is_floating_point():
        if bool(torch.isnan(value).any()):
            return math.nan
        if not bool(torch.isfinite(value).all()):
            return math.inf
        return float(value.reshape(-1)[0])
    if isinstance(value, (int, float)):
        return float(value)
    return None


def spell(v: float) -> str:
    return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")


def logged_loss(stream: Stream) -> float | None:
    """The newest value ``log()``ged under a name containing "loss" (not yet flushed
    first, else the last flushed one), None without one; a device value is copied
    here (once per alarm)."""
    import torch

    try:
        found = stream.newest(lambda name: "loss" in name.lower())
    except Exception:
        return None
    for v in found:
        if isinstance(v, torch.Tensor):
            v = scalar_of(v.detach())
        if isinstance(v, (int, float)) and not math.isfinite(v):
            return float(v)
    return next((float(v) for v in found if isinstance(v, (int, float))), None)
