"""Index out of range: class labels in a loss, embedding indices, plain indexing."""

from __future__ import annotations

import re

from .context import (
    LOSS_FUNCS,
    LOSS_TYPES,
    Context,
    Diagnosis,
    frame_row,
    layer_label,
    library_args,
    library_frame,
    mentioned_rows,
    n_classes,
    user_name_or,
)


def index_out_of_range(ctx: Context) -> Diagnosis | None:
    """A class label past the logits, an embedding index past the vocabulary, or an
    index past a tensor's dimension: each from its own message."""
    msg = ctx.message
    m = re.search(r"Target (-?\d+) is out of bounds", msg)
    if m is not None:
        return _label(ctx, int(m.group(1)))
    if "index out of range in self" in msg:
        return _embedding_index(ctx)
    m = re.search(r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)", msg)
    if m is not None:
        index, dim, size = (int(g) for g in m.groups())
        return _tensor_index(ctx, index, dim, size)
    return None


def _label(ctx: Context, label: int) -> Diagnosis:
    """A loss's target holds a class the logits do not have (cross entropy, NLL)."""
    loss = library_frame(ctx, self_types=LOSS_TYPES, functions=LOSS_FUNCS)
    n = n_classes(frame_row(ctx.frames[loss], "input")) if loss is not None else None
    args = library_args(ctx, loss) if loss is not None else []
    target = next((c for c in args if c.get("arg") == "target"), None)
    logits = next((c for c in args if c.get("arg") == "input"), None)
    facts: dict[str, object] = {"label": label, "n_classes": n}
    if target is not None:
        facts["label_min"] = target.get("min")
        facts["label_max"] = target.get("max")
    who = user_name_or(target, "The target")
    head = f"{who} contains {label}"
    if n is not None:
        head += f", but the model outputs {n} classes (valid labels: 0-{n - 1})"
    if target is not None and isinstance(target.get("max"), int):
        head += f"; labels range {target.get('min')}-{target['max']}"
    if label < 0:
        remedy = (
            "Labels must be ≥ 0: map them to 0…n_classes-1 (e.g. an ignore value "
            "needs `ignore_index=` in the loss)."
        )
    elif n is not None:
        top = facts.get("label_max")
        top = top if isinstance(top, int) else label  # the target's max, when read
        remedy = (
            f"Labels must be in 0…{n - 1}. If they start at 1, use `labels - 1`; "
            f"otherwise the last layer must output {label + 1} or more classes "
            f"(e.g. `out_features={max(label, top or label) + 1}`)."
        )
    else:
        remedy = "Labels must be in 0…n_classes-1 (n_classes = the logits' dimension 1)."
    return {
        "category": "index_out_of_range",
        "title": "Label out of range",
        "headline": head,
        "culprits": [c for c in (target, logits) if c is not None],
        "remedy": remedy,
        "facts": facts,
    }


def _embedding_index(ctx: Context) -> Diagnosis | None:
    """An ``nn.Embedding`` got an index at or past ``num_embeddings``."""
    emb = library_frame(ctx, self_types=("Embedding",), functions=("embedding",))
    if emb is None:
        return None
    name, s = layer_label(ctx, emb)
    size = s.get("num_embeddings") if s else None  # an Embedding's int
    n = size if isinstance(size, int) else None
    args = [
        c for c in library_args(ctx, emb) if str(c.get("dtype", "")).startswith(("int", "uint"))
    ]
    idx = args[0] if args else None
    head = f"An index is out of range for {name}"
    if n is not None:
        head += f" ({n} embeddings, valid indices 0-{n - 1})"
    if idx is not None and isinstance(idx.get("max"), int):
        who = user_name_or(idx, "the input")
        head += f"; {who} holds {idx['min']}-{idx['max']}"
    return {
        "category": "index_out_of_range",
        "title": "Embedding index out of range",
        "headline": head,
        "culprits": [c for c in (idx,) if c is not None],
        "remedy": "Indices must be < num_embeddings: enlarge the embedding "
        "(vocabulary size + special tokens) or fix the tokenizer/vocabulary.",
        "facts": {"num_embeddings": n},
    }


def _tensor_index(ctx: Context, index: int, dim: int, size: int) -> Diagnosis:
    """Plain indexing past a dimension: the tensor of that size the line names, if one."""
    cands = [
        c
        for c in mentioned_rows(ctx, ("tensor",))
        if isinstance(shape := c.get("shape"), list) and len(shape) > dim and shape[dim] == size
    ]
    return {
        "category": "index_out_of_range",
        "title": "Index out of range",
        "headline": f"Index {index} is out of bounds for dimension {dim} of size {size}"
        + (f" (`{cands[0]['name']}` has size {size} there)" if len(cands) == 1 else ""),
        "culprits": cands,
        "remedy": f"Valid indices in dimension {dim} are 0…{size - 1} (or negative down "
        f"to -{size}).",
        "facts": {"index": index, "dim": dim, "size": size},
        "confidence": "certain" if len(cands) <= 1 else "likely",
    }
