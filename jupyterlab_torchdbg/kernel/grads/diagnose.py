"""The at-step diagnosis of a non-finite gradient: bad input, a module's forward, weights
already NaN, the loss, or backward — named at the step it happens, before the weights change.

The step boundary's pre-hook sees this step's gradients before the optimizer applies them,
and the keeper (inputs.py) holds the batch that made them. So at the first non-finite step
of an alarm the monitor asks, in this order:

1. **The batch.** Each floating tensor of each root's kept call (positional arguments by
   the forward's parameter name, ``x``; keyword arguments by theirs, ``attention_mask``)
   is checked; the first with a NaN/Inf is named with the index of its first bad element.
   A tensor whose only non-finite values are ``-inf`` and whose name says ``mask`` is an
   additive attention mask, not bad data.
2. **The forward pass**, run once more on that batch with the pre-step weights (probe.py):
   the module that turns finite inputs into NaN/Inf, or the first module whose own weights
   are already non-finite (an earlier, unsampled step applied a NaN).
3. **The loss**, when every output was finite: the kept output of a loss module called
   after the forward (inputs.py), else a loss module re-evaluated on the probed output
   (when its kept input shape fits), else the loss logged with ``log()`` at this step.
4. Otherwise **backward** made it: the Replay action runs the step under anomaly detection.

The remedy fits the cause: a bad batch is a data pipeline problem, never "lower the
learning rate". Runs once per alarm on the training thread; its cost (a forward pass and
a few reductions, syncs on CUDA) is paid only then.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .alerts import Alert
from .probe import ForwardProbe, eager_root

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module

    from .bad_step import KeptCall, KeptLoss

KIND = "non_finite_cause"

REMEDY = {
    "input": "The batch itself holds NaN/Inf, so the data pipeline is the source, not the "
    "model or its training settings: check how this tensor is built (missing values, a "
    "division by a zero std in normalisation, a corrupt sample), e.g. assert "
    "torch.isfinite(batch).all() in the DataLoader's dataset, or drop such samples; "
    "skip_nonfinite keeps the weights finite meanwhile.",
    "forward": "Look at that module's forward for log/sqrt/division of values that can "
    "reach 0 or below, an exp or pow that overflows, or an fp16 overflow: clamp the input "
    "or add an epsilon there (torch.log(x.clamp_min(1e-12))).",
    "overflow": "The gradients exploded (no NaN source): clip gradients "
    "(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)) or lower the learning rate; "
    "the explosion alarm before it names the layer that carries the norm.",
    "weights": "The weights were already NaN/Inf before this step (a non-finite update at "
    "an unsampled step): restore a checkpoint, then clip gradients or lower the learning "
    "rate; skip_nonfinite (every step checked) stops the next such update.",
    "loss": "The model's outputs are finite but the loss is not: look for log(0) or a "
    "division by zero in the loss (use log_softmax / F.cross_entropy on logits instead of "
    "log(softmax), clamp probabilities), and check the targets of this batch.",
    "backward": "Forward and loss are finite, so the backward pass made the NaN/Inf. If "
    "the gradient norm was climbing before (an explosion alarm), the gradients overflowed: "
    "clip gradients (torch.nn.utils.clip_grad_norm_) or lower the learning rate. Otherwise "
    "look for the gradient of sqrt or norm at 0, pow with a negative exponent, a custom "
    "autograd Function or an fp16 overflow: click Replay to run this step under anomaly "
    "detection and see the op and the forward line.",
}


@dataclass
class CauseAlert(Alert):
    """An alert that names the cause: input, forward, weights, loss or backward."""

    cause: str | None = None


@dataclass
class Finding:
    cause: str
    layer: str | None
    message: str


def _param_names(module: Module) -> list[str]:
    try:
        sig = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.kind in kinds]


def _named(call: KeptCall, module: Module) -> list[tuple[str, Any]]:
    """(display name, value) for every argument of the call, nested two levels."""
    names = _param_names(module)
    top = [(names[i] if i < len(names) else f"args[{i}]", v) for i, v in enumerate(call.args)]
    top += list(call.kwargs.items())
    out: list[tuple[str, Any]] = []
    for name, v in top:
        out.append((name, v))
        if isinstance(v, (tuple, list)):
            out += [(f"{name}[{i}]", x) for i, x in enumerate(v[:64])]
        elif isinstance(v, dict):
            out += [(f"{name}[{k!r}]", x) for k, x in list(v.items())[:64]]
    return out


def bad_element(name: str, t: Tensor) -> tuple[tuple[int, ...], float, int] | None:
    """(index of the first bad element, its value, how many) of a floating tensor."""
    import torch

    if t.layout != torch.strided or t.device.type == "meta" or t.numel() == 0:
        return None
    if not (t.is_floating_point() or t.is_complex()):
        return None
    t = t.detach()
    if t.is_complex():
        bad = ~torch.isfinite(t)
    else:
        bad = torch.isnan(t) | torch.isposinf(t)
        if "mask" not in name.lower():
            bad |= torch.isneginf(t)
    n = int(bad.sum())
    if n == 0:
        return None
    first = int(bad.reshape(-1).nonzero()[0, 0])
    index: list[int] = []
    rem = first
    for size in reversed(t.shape):
        index.append(rem % size)
        rem //= size
    flat = t.reshape(-1)[first]
    value = abs(complex(flat)) if t.is_complex() else float(flat)
    return tuple(reversed(index)), value, n


def check_inputs(roots: list[tuple[str, Module, KeptCall | None]]) -> Finding | None:
    """The first tensor of the kept batch holding NaN/Inf, named with its index."""
    from torch import Tensor

    for root_name, module, call in roots:
        if call is None:
            continue
        for arg, value in _named(call, module):
            if not isinstance(value, Tensor):
                continue
            found = bad_element(arg, value)
            if found is None:
                continue
            index, v, n = found
            what = "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")
            at = ", ".join(map(str, index))
            shape = "x".join(map(str, value.shape)) or "scalar"
            more = f" ({n} of {value.numel()} values non-finite)" if n > 1 else ""
            msg = (
                f"the input batch of {root_name} holds {what}: `{arg}` ({shape}) at index "
                f"[{at}]{more}"
            )
            return Finding("input", root_name, msg)
    return None


def overflow(params: list[Any], norms: Tensor, grad_layer: str | None) -> Finding | None:
    """Finite gradient values whose float32 norm overflows (each value below ~3.4e38,
    their sum of squares above it): the gradients exploded, nothing made a NaN. Read
    once per alarm, only for the tensors whose norm is non-finite."""
    import torch

    bad = [p.grad for p, n in zip(params, norms.tolist(), strict=False) if not math.isfinite(n)]
    grads = [g for g in bad if isinstance(g, torch.Tensor) and g.layout == torch.strided]
    if not grads or len(grads) != len(bad):
        return None
    if not all(bool(torch.isfinite(g).all()) for g in grads):
        return None
    largest = max(float(g.detach().abs().amax()) for g in grads if g.numel())
    where = f" in {grad_layer}" if grad_layer else ""
    msg = (
        f"the gradient values are finite, but so large (up to {largest:.3g}{where}) that "
        "their norm overflows float32: the gradients exploded"
    )
    return Finding("overflow", grad_layer, msg)


def diagnose(
    roots: list[tuple[str, Module, KeptCall | None]],
    losses: list[KeptLoss],
    logged_loss: float | None,
    grad_layer: str | None,
    track: str,
    step: int,
) -> Finding:
    """Input, forward, weights, loss or backward (see the module docstring)."""
    found = check_inputs(roots)
    if found is not None:
        return found
    runnable: list[tuple[str, Any]] = []
    calls: list[KeptCall | None] = []
    for name, module, call in roots:
        eager = eager_root(module)
        if eager is not None and call is not None:
            runnable.append((name, eager))
            calls.append(call)
    probe = ForwardProbe(track, step, runnable)
    try:
        probe.run(calls)
        if probe.origin is not None:
            name, weights_ok = probe.origin
            if weights_ok:
                msg = f"{name}'s forward turns finite inputs into NaN/Inf"
                return Finding("forward", name, msg)
            msg = (
                f"{name}'s own weights are already NaN/Inf before this step's update (the "
                "first such module in forward order)"
            )
            return Finding("weights", name, msg)
        if probe.last_bad is not None:
            msg = f"the forward pass is non-finite from {probe.last_bad} on"
            return Finding("forward", probe.last_bad, msg)
        if not probe.ran:
            return _after_forward(None, losses, logged_loss, grad_layer, roots, [])
        return _after_forward(probe.out_max, losses, logged_loss, grad_layer, roots, probe.outputs)
    finally:
        probe.remove()


def _after_forward(
    out_max: float | None,
    losses: list[KeptLoss],
    logged_loss: float | None,
    grad_layer: str | None,
    roots: list[tuple[str, Module, KeptCall | None]],
    outputs: list[Any],
) -> Finding:
    """The forward pass was finite (or could not be re-run): the loss, or backward."""
    ran = out_max is not None or bool(outputs)
    size = f" (largest output {out_max:.3g})" if out_max is not None else ""
    forward = f"every module output is finite{size}" if ran else "the forward was not re-run"
    after = max((c.call for _, _, c in roots if c is not None), default=0)
    current = [k for k in losses if k.call > after]
    for kept in current:
        v = _scalar(kept.output)
        if v is not None and not math.isfinite(v):
            msg = f"{forward}, but the loss {kept.name} is {_spell(v)}"
            return Finding("loss", kept.name, msg)
    if not any(k.output is not None for k in current):
        for kept in losses:
            v = _reevaluate(kept, outputs)
            if v is not None and not math.isfinite(v):
                msg = f"{forward}, but the loss {kept.name} on them is {_spell(v)}"
                return Finding("loss", kept.name, msg)
        if logged_loss is not None and not math.isfinite(logged_loss):
            msg = f"{forward}, but the logged loss is {_spell(logged_loss)}"
            return Finding("loss", None, msg)
    where = f" (first in {grad_layer}, nearest the loss)" if grad_layer else ""
    msg = f"{forward} and the loss is finite: backward made the non-finite gradient{where}"
    return Finding("backward", grad_layer, msg)


def _reevaluate(kept: KeptLoss, outputs: list[Any]) -> float | None:
    """The loss module on a probed output of the kept input's size, with the kept target."""
    import torch

    module = kept.module()
    if module is None or kept.input_shape is None:
        return None
    numel = math.prod(kept.input_shape)
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.numel() == numel and out.is_floating_point():
            try:
                with torch.no_grad():
                    return _scalar(module(out.reshape(kept.input_shape), *kept.rest, **kept.kwargs))
            except Exception:
                continue
    return None


def _scalar(value: Any) -> float | None:
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


def _spell(v: float) -> str:
    return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")


def logged_loss(stream: Any) -> float | None:
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
            v = _scalar(v.detach())
        if isinstance(v, (int, float)) and not math.isfinite(v):
            return float(v)
    return next((float(v) for v in found if isinstance(v, (int, float))), None)


def alert(
    finding: Finding,
    track: str,
    step: int,
    skipped: bool,
    value: float | None,
    manual: bool = False,
) -> Alert:
    """The one alert of the bad step, naming the cause (``manual``: a loop without an
    optimizer, seen at the end of backward: nothing of ours can skip its update)."""
    kept = (
        " The optimizer step was skipped: the weights are unchanged."
        if skipped
        else " Found at the end of backward, before the loop's own update of the weights."
        if manual
        else " Found before the optimizer applied it (it is applied now; skip_nonfinite "
        "skips such steps and keeps the weights finite)."
    )
    msg = f"Non-finite gradient at step {step}: {finding.message}.{kept}"
    severity = "warning" if finding.cause == "backward" else "error"
    return CauseAlert(
        KIND,
        severity,
        step,
        finding.layer,
        msg,
        REMEDY[finding.cause],
        track,
        value,
        cause=finding.cause,
    )
