"""Size and shape mismatches: TensorDataset lengths, Linear in_features, convolution
channels, loss batch sizes, broadcasting, view/reshape, cat/stack/collate, input rank."""

from __future__ import annotations

import re

from .context import (
    LOSS_FUNCS,
    LOSS_TYPES,
    Context,
    Diagnosis,
    as_culprit,
    frame_row,
    inner_library,
    ints_in,
    layer_label,
    library_args,
    library_frame,
    mentioned_rows,
    name_for,
    shape_text,
    user_name_or,
)


def shape_mismatch(ctx: Context) -> Diagnosis | None:
    for sub in (
        _dataset_lengths,
        _matmul,
        _conv_channels,
        _batch_size,
        _broadcast,
        _view,
        _cat_stack,
        _conv_input_dims,
    ):
        d = sub(ctx)
        if d is not None:
            d.setdefault("category", "shape_mismatch")
            return d
    return None


def _dataset_lengths(ctx: Context) -> Diagnosis | None:
    if "Size mismatch between tensors" not in ctx.message:
        return None
    frame = next(
        (
            i
            for i in inner_library(ctx)
            if (frame_row(ctx.frames[i], "self") or {}).get("type") == "TensorDataset"
            or frame_row(ctx.frames[i], "tensors") is not None
        ),
        None,
    )
    tensors = frame_row(ctx.frames[frame], "tensors") if frame is not None else None
    items = (tensors or {}).get("items") or []
    items = items if isinstance(items, list) else []
    culprits = []
    lengths: list[object] = []
    for k, item in enumerate(items):
        named = name_for(ctx, item.get("_id"))
        shape = item.get("shape")
        n = shape[0] if isinstance(shape, list) and shape else "n/a"
        lengths.append(n)
        c = as_culprit(item, named[1] if named else frame, length=n)
        c["name"] = named[0] if named else f"tensors[{k}]"
        c["role"] = f"tensor {k} of TensorDataset"
        culprits.append(c)
    if len(culprits) >= 2:
        parts = [f"`{c['name']}` has {c['length']}" for c in culprits]
        head = (
            f"{parts[0]} samples but {', '.join(parts[1:])}: a TensorDataset needs the "
            "same first dimension in every tensor"
        )
    else:
        head = "The tensors given to TensorDataset have different first dimensions"
    # Only a strict majority length makes the others "odd" (100/100/90); with two
    # tensors (100 vs 90) either may be wrong, so neither is singled out.
    counts = [n for n in lengths if isinstance(n, int)]
    common = max(set(counts), key=counts.count) if counts else None
    if common is not None and counts.count(common) * 2 <= len(counts):
        common = None
    odd = [c["name"] for c in culprits if c["length"] != common] if common is not None else []
    remedy = (
        "Make the first dimensions equal: check how "
        + (", ".join(f"`{n}`" for n in odd) if odd and len(odd) < len(culprits) else "they")
        + " were built (a filter, a slice, a dropped last batch, or features and labels "
        "from different splits)."
    )
    return {
        "title": "Size mismatch in TensorDataset",
        "headline": head,
        "culprits": culprits,
        "remedy": remedy,
        "facts": {"kind": "dataset_length", "lengths": lengths},
    }


def _matmul(ctx: Context) -> Diagnosis | None:
    m = re.search(
        r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", ctx.message
    )
    if m is None:
        return None
    r1, c1, r2, c2 = (int(g) for g in m.groups())
    facts: dict[str, object] = {"kind": "matmul", "mat1": [r1, c1], "mat2": [r2, c2]}
    layer = library_frame(
        ctx, self_types=("Linear", "LazyLinear", "NonDynamicallyQuantizableLinear")
    )
    if layer is not None:
        name, s = layer_label(ctx, layer)
        in_f = (s or {}).get("in_features", r2)
        out_f = (s or {}).get("out_features", c2)
        args = [c for c in library_args(ctx, layer) if c.get("arg") != "self"]
        inp = args[0] if args else None
        shape = shape_text(inp.get("shape")) if inp else f"[…, {c1}]"
        who = user_name_or(inp, "its input")
        layer_c = as_culprit(s, layer, role="layer") if s else None
        named = name_for(ctx, s.get("_id")) if s else None
        if layer_c is not None and named is not None:
            layer_c["name"], layer_c["frame"] = named
        facts.update(in_features=in_f, got_features=c1)
        return {
            "title": "Shape mismatch in a Linear layer",
            "headline": f"{name} expects in_features={in_f}, but {who} has {c1} features "
            f"(shape {shape})",
            "culprits": [c for c in (layer_c, inp) if c is not None],
            "remedy": (
                f"Make the sizes agree: the data arriving here has {c1} features, so use "
                f"`nn.Linear({c1}, {out_f})`, or change the previous layer to output "
                f"{in_f}."
            ),
            "hints": [
                "After convolutions, flatten with `nn.Flatten()` and compute the flattened "
                "size from a dummy batch, or use `nn.LazyLinear(out_features)`."
            ],
            "facts": facts,
        }
    cands = [
        c
        for c in mentioned_rows(ctx, ("tensor",))
        if c.get("shape") in ([r1, c1], [r2, c2], [c2, r2])
    ]
    return {
        "title": "Matrix shapes do not match",
        "headline": f"Matrix multiplication of {r1}x{c1} by {r2}x{c2}: the inner sizes "
        f"{c1} and {r2} differ",
        "culprits": cands,
        "remedy": "The last dimension of the first operand must equal the first dimension "
        "of the second: transpose (`.T`) or reshape one of them.",
        "facts": facts,
        "confidence": "certain",
    }


def _conv_channels(ctx: Context) -> Diagnosis | None:
    m = re.search(
        r"Given groups=(\d+), weight of size \[([\d, ]*)\], expected input\[([\d, ]*)\] to "
        r"have (\d+) channels, but got (\d+) channels instead",
        ctx.message,
    )
    if m is None:
        return None
    expected, got = int(m.group(4)), int(m.group(5))
    input_shape = ints_in(m.group(3))
    layer = library_frame(ctx, self_types=("Conv1d", "Conv2d", "Conv3d"))
    name, s = layer_label(ctx, layer) if layer is not None else ("the convolution", None)
    culprits = []
    if s is not None and layer is not None:
        c = as_culprit(s, layer, role="layer")
        named = name_for(ctx, s.get("_id"))
        if named is not None:
            c["name"], c["frame"] = named
        culprits.append(c)
        culprits += [x for x in library_args(ctx, layer) if x.get("arg") != "self"][:1]
    return {
        "title": "Channel mismatch in a convolution",
        "headline": f"{name} expects {expected} input channels, but the input "
        f"{shape_text(input_shape)} has {got}",
        "culprits": culprits,
        "remedy": (
            f"Match in_channels to the data (`in_channels={got}`), or convert the data: "
            "grayscale to RGB with `x.repeat(1, 3, 1, 1)`; images stored as (N, H, W, C) "
            "need `x.permute(0, 3, 1, 2)`."
        ),
        "facts": {"kind": "conv_channels", "expected": expected, "got": got},
    }


def _batch_size(ctx: Context) -> Diagnosis | None:
    m = re.search(
        r"Expected input batch_size \((\d+)\) to match target batch_size \((\d+)\)", ctx.message
    )
    if m is None:
        return None
    a, b = int(m.group(1)), int(m.group(2))
    loss = library_frame(ctx, self_types=LOSS_TYPES, functions=LOSS_FUNCS)
    culprits = library_args(ctx, loss) if loss is not None else []
    culprits = [c for c in culprits if c.get("arg") in ("input", "target")]
    shapes = ", ".join(f"`{c['name']}` {shape_text(c.get('shape'))}" for c in culprits)
    return {
        "title": "Batch size mismatch in the loss",
        "headline": f"The loss got {a} predictions but {b} targets"
        + (f" ({shapes})" if shapes else ""),
        "culprits": culprits,
        "remedy": "Predictions and targets need the same first dimension: a `.view(-1, …)` "
        "that merged dimensions, or labels from another batch, are the usual causes.",
        "facts": {"kind": "batch_size", "input": a, "target": b},
    }


def _broadcast(ctx: Context) -> Diagnosis | None:
    m = re.search(
        r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at "
        r"non-singleton dimension (\d+)",
        ctx.message,
    )
    if m is None:
        return None
    a, b, dim = (int(g) for g in m.groups())
    cands = [
        c
        for c in mentioned_rows(ctx, ("tensor",))
        if isinstance(shape := c.get("shape"), list) and (a in shape or b in shape)
    ]
    head = f"Shapes do not broadcast: size {a} vs {b} at dimension {dim}"
    if len(cands) == 2:
        head += " (" + " and ".join(f"`{c['name']}` {shape_text(c['shape'])}" for c in cands) + ")"
    return {
        "title": "Shapes do not broadcast",
        "headline": head,
        "culprits": cands,
        "remedy": "Shapes are compared from the last dimension; each pair must be equal or "
        "1. Align them with `.view(...)`, `.unsqueeze(d)` / `.squeeze(d)`, or check that "
        "both come from the same batch.",
        "facts": {"kind": "broadcast", "a": a, "b": b, "dim": dim},
        "confidence": "certain" if len(cands) <= 2 else "likely",
    }


def _view(ctx: Context) -> Diagnosis | None:
    msg = ctx.message
    if "view size is not compatible with input tensor's size and stride" in msg:
        return {
            "title": "view() on non-contiguous memory",
            "headline": "`.view()` needs contiguous memory (after `.t()`, `.transpose()`, "
            "`.permute()` or slicing it usually is not)",
            "remedy": "Use `.reshape(...)`, or `.contiguous().view(...)`.",
            "facts": {"kind": "view_stride"},
        }
    m = re.search(r"shape '\[([-\d, ]*)\]' is invalid for input of size (\d+)", msg)
    if m is None:
        return None
    shape = ints_in(m.group(1))
    size = int(m.group(2))
    known = 1
    for d in shape:
        if d != -1:
            known *= d
    cands = [c for c in mentioned_rows(ctx, ("tensor",)) if _numel(c.get("shape")) == size]
    who = f"`{cands[0]['name']}` {shape_text(cands[0]['shape'])}" if len(cands) == 1 else "a tensor"
    if -1 in shape:
        why = f"{size} is not a multiple of {known}"
    else:
        why = f"the new shape needs {known} elements"
    return {
        "title": "Invalid view/reshape",
        "headline": f"Cannot reshape {who} of {size} elements to {shape_text(shape)}: {why}",
        "culprits": cands if len(cands) == 1 else [],
        "remedy": "Check the tensor's real shape: the image size, channel count or the last "
        "(smaller) batch often differ from what the code assumes. `x.flatten(1)` or "
        "`x.view(x.size(0), -1)` keep the batch dimension.",
        "facts": {"kind": "view", "shape": shape, "size": size},
    }


def _numel(shape: object) -> int | None:
    if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    return n


def _cat_stack(ctx: Context) -> Diagnosis | None:
    msg = ctx.message
    m = re.search(
        r"Sizes of tensors must match except in dimension (\d+)\. Expected size (\d+) but got "
        r"size (\d+) for tensor number (\d+)",
        msg,
    )
    if m is not None:
        dim, exp, got, k = (int(g) for g in m.groups())
        return {
            "title": "torch.cat: sizes differ",
            "headline": f"Tensor number {k} has size {got} where {exp} is expected (all "
            f"dimensions except {dim} must match)",
            "remedy": "Make every dimension except the concatenation dimension equal, or "
            "concatenate along another `dim=`.",
            "facts": {"kind": "cat", "dim": dim, "expected": exp, "got": got, "index": k},
        }
    m = re.search(
        r"stack expects each tensor to be equal size, but got \[([\d, ]*)\] at entry (\d+) "
        r"and \[([\d, ]*)\] at entry (\d+)",
        msg,
    )
    if m is None:
        return None
    a, b = ints_in(m.group(1)), ints_in(m.group(3))
    collate = any(
        "collate" in str(f.get("function", "")) or "collate" in str(f.get("file", ""))
        for f in ctx.frames
    )
    head = f"Cannot stack tensors of shapes {shape_text(a)} and {shape_text(b)}"
    remedy = "Give every tensor the same shape before stacking (resize, crop or pad)."
    if collate:
        head = "The DataLoader could not batch samples of different shapes: " + head[11:]
        remedy = (
            "Samples differ in size: resize/crop them in the dataset's transform, pad them, "
            "or pass a `collate_fn` that pads (e.g. `torch.nn.utils.rnn.pad_sequence`)."
        )
    return {
        "title": "torch.stack: sizes differ",
        "headline": head,
        "remedy": remedy,
        "facts": {"kind": "collate" if collate else "stack", "shapes": [a, b]},
    }


def _conv_input_dims(ctx: Context) -> Diagnosis | None:
    m = re.search(
        r"Expected (\d)D \(unbatched\) or (\d)D \(batched\) input to (\w+), but got input of "
        r"size: \[([\d, ]*)\]",
        ctx.message,
    )
    if m is None:
        return None
    unb, bat, op, shape = int(m.group(1)), int(m.group(2)), m.group(3), ints_in(m.group(4))
    return {
        "title": "Wrong number of dimensions",
        "headline": f"`{op}` expects a {unb}D or {bat}D input, but got shape {shape_text(shape)}",
        "remedy": "Add the missing dimension (`x.unsqueeze(0)` for a batch of one, "
        "`x.unsqueeze(1)` for one channel) or flatten the extra one.",
        "facts": {"kind": "ndim", "shape": shape},
    }
