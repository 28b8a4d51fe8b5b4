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
2. **The forward pass**, run once more on a copy of that batch with the pre-step weights
   (probe.py): the module that turns finite inputs into NaN/Inf, or the first module whose
   own weights are already non-finite (an earlier, unsampled step applied a NaN). Only a
   forward that is torch's own is re-run without a click (R53, rerun.py): for a model
   with code of the user's (``Net.forward``, a hook) the alert names that code and says
   the forward was not re-run; Replay re-runs it on a click.
3. **The loss**, when every output was finite: what ``backward()`` was called on at this
   step (backward_root.py: a loss module's output, a model's ``.loss``, any expression),
   read at the step; when that was not seen, a non-finite output of a loss module called
   after the forward (inputs.py), a loss module re-evaluated on the probed output, or the
   loss logged with ``log()``.
4. **Backward** made it, when the forward re-run is finite *and* the loss was read finite:
   the Replay action runs the step under anomaly detection. When the loss was not read,
   the cause is ``unchecked`` and the message says which of the two was not checked.

Each message states a fact only when it was checked (R47): "every module output is
finite" is said of the re-run (same batch, pre-step weights), and says when dropout masks
differ or not every module was looked at; "the loss is finite" only of the tensor
``backward()`` was called on (loss_check.py). The remedy fits the cause (cause_alert.py):
a bad batch is a data pipeline problem, never "lower the learning rate"; nor is a step
before which this optimizer applied no update. Runs once per alarm on the training
thread; its cost (a forward pass and a few reductions, syncs on CUDA) is paid only then.
"""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING

from .backward_root import root_of
from .finding import Finding
from .loss_check import LossFacts, after_forward, scalar_of, spell
from .probe import ForwardProbe, dropout_active, eager_root
from .rerun import user_code, user_globals

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module

    from .bad_step import KeptCall, KeptLoss, KeptRoot


def _param_names(module: Module) -> list[str]:
    try:
        sig = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.kind in kinds]


def _named(call: KeptCall, module: Module) -> list[tuple[str, object]]:
    """(display name, value) for every argument of the call, nested two levels."""
    names = _param_names(module)
    top = [(names[i] if i < len(names) else f"args[{i}]", v) for i, v in enumerate(call.args)]
    top += list(call.kwargs.items())
    out: list[tuple[str, object]] = []
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


def overflow(params: list[Tensor], norms: Tensor, grad_layer: str | None) -> Finding | None:
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
    root: KeptRoot | None = None,
    ns: dict[str, object] | None = None,
    rerun_ok: frozenset[int] = frozenset(),
) -> Finding:
    """Input, forward, weights, loss or backward (see the module docstring).
    ``rerun_ok``: ids of the models whose forward the user let the tool re-run
    (``watch(model, rerun_forward=True)``); any other forward is re-run only when it is
    torch's own (rerun.user_code)."""
    found = check_inputs(roots)
    if found is not None:
        return found
    runnable: list[tuple[str, Module]] = []
    calls: list[KeptCall | None] = []
    for name, module, call in roots:
        eager = eager_root(module)
        if eager is not None and call is not None:
            runnable.append((name, eager))
            calls.append(call)
    after = max((c.call for _, _, c in roots if c is not None), default=0)
    loss = LossFacts(root_of(root, after), losses, logged_loss, after, ns)
    modules = [m for _, m in runnable]
    # R53: the user's own code (a forward, a hook) is not re-run without a click.
    who = None if all(id(m) in rerun_ok for m in modules) else user_code(modules)
    probe = ForwardProbe(track, step, runnable if who is None else [], now=True)
    try:
        if who is None:
            spaces = ([ns] if ns is not None else []) + user_globals(modules)
            probe.run(calls, spaces)
        elif (bad := _first_bad_weights(runnable)) is not None:
            # not re-run, but the weights can be read without running any code
            msg = (
                f"{bad}'s own weights are already NaN/Inf before this step's update (the "
                f"first such module in module order); {_forward_fact(probe, modules, '', who)}"
            )
            return Finding("weights", bad, msg)
        names = ", ".join(n for n, _ in runnable)
        rerun = f"re-ran the forward of {names} on a copy of step {step}'s batch with the "
        rerun += "pre-step weights"
        if probe.left:
            rerun += f"; it changed {', '.join(probe.left[:3])}, not put back"
        if probe.origin is not None:
            name, weights_ok = probe.origin
            own = _own_loss_only(name, runnable, probe.outputs, loss, rerun)
            if own is not None:
                return own
            if weights_ok:
                msg = f"{name}'s forward turns finite inputs into NaN/Inf ({rerun})"
                return Finding("forward", name, msg)
            msg = (
                f"{name}'s own weights are already NaN/Inf before this step's update (the "
                f"first such module in forward order; {rerun})"
            )
            return Finding("weights", name, msg)
        if probe.last_bad is not None:
            msg = f"the forward pass is non-finite from {probe.last_bad} on ({rerun})"
            return Finding("forward", probe.last_bad, msg)
        forward = _forward_fact(probe, modules, rerun, who)
        return after_forward(forward, probe.ran, loss, grad_layer, probe.outputs)
    finally:
        probe.remove()


def _first_bad_weights(runnable: list[tuple[str, Module]]) -> str | None:
    """The first module (in module order) whose own parameters hold NaN/Inf."""
    from .naming import clean_param_name
    from .probe import MAX_MODULES, params_finite

    for prefix, root in runnable:
        for i, (name, m) in enumerate(root.named_modules()):
            if i >= MAX_MODULES:
                break
            if not params_finite(m):
                clean = clean_param_name(root, f"{name}.x").rpartition(".")[0] if name else ""
                return f"{prefix}.{clean}" if clean else prefix
    return None


def _own_loss_only(
    name: str,
    runnable: list[tuple[str, Module]],
    outputs: list[object],
    loss: LossFacts,
    rerun: str,
) -> Finding | None:
    """The root named by the probe computes its own loss (``outputs.loss``), and that
    loss is the only non-finite part of its output on the re-run: the loss, not the
    model's other outputs, made it (both checked on the re-run)."""
    import torch

    from .loss_sources import model_loss
    from .probe import finite

    if name not in {n for n, _ in runnable}:
        return None
    for out in outputs:
        own = model_loss(out, torch.Tensor)
        if own is None or finite(own):
            continue
        rest = [t for t in _tensors_of(out) if t is not own]
        if rest and all(finite(t) for t in rest):
            said = f"the loss {loss.name()}" if loss.root is not None else f"{name}'s own loss"
            v = scalar_of(own)
            msg = (
                f"{said} is {spell(v if v is not None else math.nan)} on this step's batch "
                f"({rerun}), while {name}'s other outputs are finite"
            )
            return Finding("loss", name, msg)
    return None


def _tensors_of(out: object) -> list[Tensor]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        values: list[object] = list(out.values())
    elif isinstance(out, (tuple, list)):
        values = list(out)
    else:
        return []
    return [v for v in values[:256] if isinstance(v, torch.Tensor)]


def _forward_fact(probe: ForwardProbe, modules: list[Module], rerun: str, who: str | None) -> str:
    """What the forward re-run checked, in words (R47: of the re-run, as far as it went)."""
    if who is not None:
        return (
            f"the forward was not re-run: code in {who} may have side effects (Replay "
            "re-runs your forward once, on a click)"
        )
    if not probe.ran:
        return "the forward was not re-run (no root model could be run eagerly)"
    notes = [rerun]
    if probe.out_max is not None:
        notes.append(f"largest output {probe.out_max:.3g}")
    if dropout_active(modules):
        notes.append("its dropout masks differ from the step's")
    which = (
        "every module output is finite"
        if probe.complete
        else f"the outputs of the first {probe.hooked} modules are finite (the rest were not "
        "looked at)"
    )
    return f"{which} ({'; '.join(notes)})"


def unkept(modules: list[Module], grad_layer: str | None, first: bool = True) -> Finding:
    """A bad step whose batch was not kept: what could still be checked (the weights).
    ``first``: the model was first seen at this step (else its forward bypassed the
    hooks: ``model.forward(x)`` called directly)."""
    from .probe import params_finite

    where = f" (first in {grad_layer}, nearest the loss)" if grad_layer else ""
    why = (
        "the model was first seen at this step"
        if first
        else "the model's forward hooks did not run: a direct call of model.forward(...) "
        "bypasses them"
    )
    bad = [m for m in modules if not params_finite(m, recurse=True)]
    if bad:
        msg = (
            "the weights are already NaN/Inf before this step's update; this step's batch "
            f"was not kept ({why}), so the inputs and the forward were not checked"
        )
        return Finding("weights", grad_layer, msg)
    nxt = "; the next non-finite step is diagnosed in full" if first else ""
    msg = (
        f"the weights are finite, but this step's batch was not kept ({why}), so the "
        f"inputs, the forward and the loss were not checked{nxt}{where}"
    )
    return Finding("unchecked", grad_layer, msg)
