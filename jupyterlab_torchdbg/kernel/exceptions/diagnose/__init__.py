"""The root-cause classifier: exception + frame summaries -> category, culprit, remedy.

Each rule recognises one family of PyTorch errors from the message text and then names
the culprits from the captured locals: the user's variables on the failing expression
and, by object identity, the arguments of the library frame that raised (``Linear.forward``
``self`` and ``input``). A rule states only what the message and the metadata show; when
it cannot name a variable it says what it knows ("a tensor on meta was mixed with one on
cpu") and never guesses a name. Whatever no rule recognises gets the generic view.

Rules read summaries (plain dicts) and, through ``Context.resolve``, the live objects of
summarised locals while the capture runs, by identity only: to find a module's dotted
name inside a user model (``model.fc2``), the parameter on an odd device, and where the user
keeps an unnamed operand (an entry of a dict or list, a module attribute or buffer, a
gradient, an optimizer state entry: ``batch['x']``, ``opt.state[p]['exp_avg']``).
No rule reads tensor data (the summaries already hold the small-CPU-tensor min/max/finite
flags) and none touches CUDA (R22, R23).
"""

from __future__ import annotations

from collections.abc import Callable

from .autograd import autograd_no_grad, inplace_modification, non_finite
from .context import Context, Diagnosis
from .data_loader import explain as explain_loader_error
from .device_dtype import device_mismatch, dtype_mismatch
from .indexing import index_out_of_range
from .memory import device_side_assert, out_of_memory
from .shapes import shape_mismatch

__all__ = ["RULES", "Context", "diagnose", "explain_loader_error"]


def diagnose(ctx: Context) -> Diagnosis:
    """Run the rules in order; the first that recognises the error wins."""
    for rule in RULES:
        d = _safe(rule, ctx)
        if d is not None:
            return _finish(d, ctx)
    for i, (etype, message) in enumerate(ctx.others[:8]):
        sub = Context(
            exc_type=etype,
            exc_module="",
            message=message,
            frames=ctx.frames,
            focus=ctx.focus,
            mentioned=ctx.mentioned,
            resolve=ctx.resolve,
            scan_tensors=ctx.scan_tensors,
        )
        for rule in RULES:
            d = _safe(rule, sub)
            if d is not None:
                facts = d.setdefault("facts", {})
                if isinstance(facts, dict):
                    facts["from_related"] = i
                d["confidence"] = "likely"
                return _finish(d, ctx)
    return _finish(generic(ctx), ctx)


def _safe(rule: Callable[[Context], Diagnosis | None], ctx: Context) -> Diagnosis | None:
    try:
        return rule(ctx)
    except Exception:
        return None  # a rule that trips over odd metadata falls through to the next


def _finish(d: Diagnosis, ctx: Context) -> Diagnosis:
    d.setdefault("culprits", [])
    d.setdefault("remedy", None)
    d.setdefault("hints", [])
    d.setdefault("facts", {})
    d.setdefault("confidence", "certain")
    d.setdefault("links", [])
    d["where"] = ctx.focus
    return d


def generic(ctx: Context) -> Diagnosis:
    first = ctx.message.strip().splitlines()[0] if ctx.message.strip() else ""
    return {
        "category": "generic",
        "title": ctx.exc_type,
        "headline": f"{ctx.exc_type}: {first[:300]}" if first else ctx.exc_type,
        "culprits": [],
        "remedy": None,
        "confidence": "certain",
    }


#: In order: the first rule that recognises the error wins. OOM and sticky CUDA errors
#: come first (their messages mention devices and shapes too).
RULES: list[Callable[[Context], Diagnosis | None]] = [
    out_of_memory,
    device_side_assert,
    device_mismatch,
    dtype_mismatch,
    index_out_of_range,
    shape_mismatch,
    inplace_modification,
    autograd_no_grad,
    non_finite,
]
