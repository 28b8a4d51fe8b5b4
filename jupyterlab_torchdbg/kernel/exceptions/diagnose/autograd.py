"""Autograd failures: in-place modification, backward without a graph, non-finite values."""

from __future__ import annotations

import re

from ..summarize.object_parts import named_modules, part
from .context import (
    MAX_WALK,
    Context,
    Diagnosis,
    Row,
    as_culprit,
    frame_rows,
    ints_in,
    mentioned_rows,
    shape_text,
    user_frames,
)

_INPLACE_MODULES = (
    "ReLU",
    "ReLU6",
    "LeakyReLU",
    "ELU",
    "SELU",
    "CELU",
    "Hardtanh",
    "Hardswish",
    "Hardsigmoid",
    "SiLU",
    "Mish",
    "Threshold",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "AlphaDropout",
)


def inplace_modification(ctx: Context) -> Diagnosis | None:
    m = re.search(
        r"modified by an inplace operation: \[([\w.]+) \[([\d, ]*)\]\], which is output "
        r"(\d+) of (\w+), is at version (\d+); expected version (\d+)",
        ctx.message,
    )
    if m is None and "modified by an inplace operation" not in ctx.message:
        return None
    facts: dict[str, object] = {}
    culprits: list[Row] = []
    if m is not None:
        shape = ints_in(m.group(2))
        op, version, expected = m.group(4), int(m.group(5)), int(m.group(6))
        facts = {"shape": shape, "op": op, "version": version, "expected_version": expected}
        seen: set[object] = set()
        for i in user_frames(ctx):
            for r in frame_rows(ctx.frames[i]):
                if (
                    r.get("kind") == "tensor"
                    and r.get("shape") == shape
                    and r.get("version") == version
                    and r.get("_id") not in seen
                ):
                    seen.add(r.get("_id"))
                    culprits.append(as_culprit(r, i, role=f"shape and version {version} match"))
        culprits += _inplace_modules(ctx)
        head = (
            f"A tensor {shape_text(shape)} that autograd saved (output {m.group(3)} of {op}) "
            f"was modified in place: now at version {version}, autograd expected {expected}"
        )
        tensors = [c for c in culprits if c.get("kind") == "tensor"]
        if len(tensors) == 1:
            head += f"; `{tensors[0]['name']}` matches its shape and version"
    else:
        head = "A tensor needed for the gradient was modified by an in-place operation"
    return {
        "category": "inplace_modification",
        "title": "In-place modification breaks backward",
        "headline": head,
        "culprits": culprits,
        "remedy": (
            "Use the out-of-place form (`x = x + 1` instead of `x += 1`, `x.relu()` instead "
            "of `x.relu_()`), set `inplace=False` on activations, or `.clone()` the tensor "
            "before modifying it."
        ),
        "hints": [
            "`torch.autograd.set_detect_anomaly(True)` makes backward show the forward "
            "line that created the tensor."
        ],
        "facts": facts,
        "confidence": "likely" if culprits else "certain",
    }


def _inplace_modules(ctx: Context) -> list[Row]:
    """Layers of user models built with ``inplace=True`` (facts, offered as suspects)."""
    out: list[Row] = []
    for i in user_frames(ctx):
        for r in frame_rows(ctx.frames[i]):
            if r.get("kind") != "module":
                continue
            model = ctx.resolve_row(r)
            if model is None:
                continue
            try:
                for path, sub in named_modules(model, MAX_WALK):
                    if len(out) >= 5:
                        break
                    if (
                        part(sub, "inplace") is True
                        and type(sub).__name__ in _INPLACE_MODULES
                        and type(sub).__module__.startswith("torch.nn.")
                    ):
                        full = f"{r['name']}.{path}" if path else str(r["name"])
                        out.append(
                            {
                                "name": full,
                                "kind": "module",
                                "type": type(sub).__name__,
                                "text": f"{type(sub).__name__}(inplace=True)",
                                "frame": i,
                                "role": "in-place layer",
                            }
                        )
            except Exception:
                continue
        if out:
            break
    return out


def autograd_no_grad(ctx: Context) -> Diagnosis | None:
    if "does not require grad and does not have a grad_fn" not in ctx.message:
        return None
    cands = [c for c in mentioned_rows(ctx, ("tensor",)) if c.get("requires_grad") is False]
    who = f"`{cands[0]['name']}`" if len(cands) == 1 else "The tensor"
    return {
        "category": "autograd",
        "title": "No graph to differentiate",
        "headline": f"{who} does not require grad: it was computed without autograd",
        "culprits": cands,
        "remedy": (
            "Look for `torch.no_grad()` / `torch.inference_mode()` around the forward pass, "
            "`.detach()`, `.item()` or `.numpy()` in the loss computation, or parameters "
            "with `requires_grad=False`."
        ),
    }


def non_finite(ctx: Context) -> Diagnosis | None:
    m = re.search(r"Function '(\w+)' returned (nan|inf) values in its (\d+)\w* output", ctx.message)
    if m is not None:
        return {
            "category": "non_finite",
            "title": "Non-finite gradient",
            "headline": f"The backward of `{m.group(1)}` produced {m.group(2).upper()} "
            "(anomaly detection)",
            "remedy": (
                "Check that op's inputs: log/sqrt/pow of values ≤ 0, division by ~0, "
                "overflow in float16. Add an epsilon, clamp, or use the stable variant "
                "(`log_softmax`, `BCEWithLogitsLoss`)."
            ),
            "facts": {"op": m.group(1), "value": m.group(2)},
            "links": ["grads"],
        }
    # A non-finite loss is the diagnosis only when the failing expression uses it, or the
    # message speaks of NaN/Inf and a function frame holds one: a NaN `loss` left in the
    # notebook's namespace by an earlier cell explains nothing about a KeyError.
    bad = [
        as_culprit(c, c.get("frame"), role="non-finite loss")
        for c in mentioned_rows(ctx, ("tensor", "number"))
        if "loss" in str(c.get("name", "")).lower() and c.get("finite") is False
    ]
    if not bad and re.search(r"(?i)\b(nan|inf|infinity|finite|diverg\w*)\b", ctx.message):
        for i in user_frames(ctx):
            if ctx.frames[i].get("namespace"):
                continue
            for r in frame_rows(ctx.frames[i]):
                if "loss" in str(r.get("name", "")).lower() and r.get("finite") is False:
                    bad.append(as_culprit(r, i, role="non-finite loss"))
            if bad:
                break
    if not bad:
        return None
    return {
        "category": "non_finite",
        "title": "Non-finite loss",
        "headline": f"`{bad[0]['name']}` is not finite (NaN or Inf)",
        "culprits": bad,
        "remedy": (
            "Lower the learning rate, clip gradients "
            "(`torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)`), and check the "
            "inputs for NaN/Inf and ops like log/sqrt/division near 0."
        ),
        "hints": ["The gradient panel shows the first layer and step that went non-finite."],
        "links": ["grads"],
    }
