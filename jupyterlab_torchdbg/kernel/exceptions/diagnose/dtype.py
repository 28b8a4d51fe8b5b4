"""Dtype mismatches: name the tensor or module of the odd dtype and convert that one.

Three shapes of the error: a loss whose class-index target is not int64; a layer
(``Linear``, ``Conv2d``, ``LSTM``) whose input dtype is not its weights' (the input is
converted, unless the layer is the odd one inside a model of another dtype); and two or
more tensors of different dtypes in one operation, where the minority dtype is the odd
one out (a tie goes to the model's dtype, then to float32, torch's default: a float64
tensor beside a float32 one is usually a NumPy array). Index tensors of a dtype an index
cannot have (float token ids, int32 labels for ``one_hot``) are here too.
"""

from __future__ import annotations

import re
import sys

from ..summarize.object_parts import named_parameters
from ..summarize.tensor_meta import read_meta
from .context import (
    LOSS_FUNCS,
    LOSS_TYPES,
    MAX_WALK,
    Context,
    Diagnosis,
    Row,
    as_culprit,
    first_match,
    frame_row,
    layer_label,
    library_args,
    library_frame,
    name_for,
    user_name_or,
)
from .involved import code_path, collapse, involved
from .odd_one_out import join, majority, model_value, sentence, split

_DTYPE_NAMES = {
    "double": "float64",
    "float": "float32",
    "half": "float16",
    "bfloat16": "bfloat16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "byte": "uint8",
    "char": "int8",
    "bool": "bool",
    "complexfloat": "complex64",
    "complexdouble": "complex128",
    "float64": "float64",
    "float32": "float32",
    "float16": "float16",
    "int64": "int64",
    "int32": "int32",
}
#: The short conversion method for a dtype (`x.float()`), else `.to(torch.<dtype>)`.
_METHOD = {
    "float32": "float",
    "float64": "double",
    "float16": "half",
    "bfloat16": "bfloat16",
    "int64": "long",
    "int32": "int",
}
_LAYERS = ("Linear", "Conv1d", "Conv2d", "Conv3d", "Bilinear", "Embedding", "LSTM", "GRU", "RNN")


def _dtype(name: str) -> str | None:
    n = name.lower().removeprefix("c10::").removeprefix("torch.").removesuffix("tensor")
    return _DTYPE_NAMES.get(n)


_DTYPE_PATTERNS = [
    r"expected target dtype to be (\w+)(?: or (\w+))?, but got (\w+)",
    r"must have the same dtype, but got ([\w, ]+)",
    r"expected dtype (\w+) for `\w+` but got dtype (\w+)",
    r"to have the same dtype, but got:? (\w+) != (\w+)",
    r"expected scalar type (\w+) but found (\w+)",
    r"Input type \((?:c10::)?(\w+)\) and (?:weight|bias) type \((?:c10::)?(\w+)\) "
    r"should be the same",
    r"Input type \(torch\.(\w+)\) and weight type \(torch\.(\w+)\) should be the same",
    r"input dtype \(torch\.(\w+)\) does not match weight dtype \(torch\.(\w+)\)",
    r"Found dtype (\w+) but expected (\w+)",
    r"result type (\w+) can't be cast to the desired output type (\w+)",
    r"[Ee]xpected object of scalar type (\w+) but got scalar type (\w+)",
    r"\((\w+)\) and \w+ \((\w+)\) must have the same scalar type",
    r"expected (?:both vectors|input and target|self and \w+) to have (?:the )?same dtype"
    r"(?:, but found (\w+) and (\w+))?",
]
_INDEX_PATTERNS = [
    r"argument #\d+ '(indices)' to have one of the following scalar types: [\w, ]+; but got",
    r"(one_hot) is only applicable to index tensor of type LongTensor",
    r"(\w+)\(\): Expected dtype int(?:32 or int64|32/int64|64) for index",
]


def dtype_mismatch(ctx: Context) -> Diagnosis | None:
    index = _index_dtype(ctx)
    if index is not None:
        return index
    m = first_match(_DTYPE_PATTERNS, ctx.message)
    if m is None:
        return None
    words = re.findall(r"[\w:]+", " ".join(g for g in m.groups() if g))
    named = list(dict.fromkeys(d for d in map(_dtype, words) if d))
    loss = library_frame(ctx, self_types=LOSS_TYPES, functions=LOSS_FUNCS)
    if "target dtype" in ctx.message and loss is not None:
        return _loss_target(ctx, loss, named)
    layer = library_frame(ctx, self_types=_LAYERS)
    if layer is not None:
        d = _layer_input(ctx, layer, named)
        if d is not None:
            return d
    return _odd_dtype(ctx, named)


def _loss_target(ctx: Context, loss: int, named: list[str]) -> Diagnosis:
    target = next((c for c in library_args(ctx, loss) if c.get("arg") == "target"), None)
    got = named[-1] if named else (target or {}).get("dtype", "n/a")
    who = user_name_or(target, "The target")
    name = target["name"] if target and target.get("named", True) else "labels"
    return {
        "category": "dtype_mismatch",
        "title": "Target dtype for the loss",
        "headline": f"{who} is {got}, but "
        f"`{ctx.frames[loss].get('function')}` needs class indices as int64 (Long)",
        "culprits": [target] if target else [],
        "remedy": (
            f"Convert the labels: `{name} = {name}.long()`. (Soft labels are float class "
            "probabilities with the same shape as the logits.)"
        ),
        "facts": {"dtypes": named, "expected": "int64"},
    }


def _layer_input(ctx: Context, layer: int, named: list[str]) -> Diagnosis | None:
    """A layer and its input disagree. The input is converted to the layer's dtype: the
    model's dtype was chosen (``model.half()``), the input's usually was not. Unless the
    layer is the odd one inside its model (one float16 layer among float32 ones)."""
    label, s = layer_label(ctx, layer)
    args = [c for c in library_args(ctx, layer) if c.get("arg") not in ("self", "hx")]
    layer_dtypes = s.get("dtypes") if s else None
    if s is None or not isinstance(layer_dtypes, list) or not layer_dtypes:
        return None
    inp = next((c for c in args if c.get("dtype") not in layer_dtypes), None)
    if inp is None:
        return None
    layer_c = as_culprit(s, layer)
    own = name_for(ctx, s.get("_id"))
    if own is not None:
        layer_c["name"], layer_c["frame"] = own
    got, want = str(inp.get("dtype")), str(layer_dtypes[0])
    facts = {"dtypes": named, "expected": want}
    rest = _model_dtypes(ctx, own)
    if rest is not None and got in rest and rest[got] > rest.get(want, 0):
        root = str(own[0]).split(".")[0] if own else "model"
        path = code_path(str(own[0])) if own else "layer"
        return {
            "category": "dtype_mismatch",
            "title": "Dtype mismatch",
            "headline": f"{label} has {want} weights; its input and the rest of `{root}` are {got}",
            "culprits": [layer_c, inp],
            "remedy": f"Convert the layer: `{path}.to(torch.{got})`.",
            "facts": {**facts, "expected": got, "odd": [layer_c.get("name")]},
        }
    who = user_name_or(inp, "The input")
    remedy = f"Convert the input: {_convert(inp, want)}."
    if want in ("float16", "bfloat16") and got == "float32":
        devs = s.get("devices")
        dev = devs[0].split(":")[0] if isinstance(devs, list) and devs else "cuda"
        remedy += (
            f" Or run the forward under `torch.autocast('{dev}', dtype=torch.{want})`, "
            "which casts the input for each layer."
        )
    hints = []
    if got == "float64":
        hints.append("NumPy arrays are float64 by default: `torch.from_numpy(a).float()`.")
    if own is not None:
        hints.append(f"Or convert the layer instead: `{code_path(own[0])}.to(torch.{got})`.")
    return {
        "category": "dtype_mismatch",
        "title": "Dtype mismatch",
        "headline": f"{who} is {got}, but {label} has {' and '.join(layer_dtypes)} weights",
        "culprits": [inp, layer_c],
        "remedy": remedy,
        "hints": hints,
        "facts": {**facts, "odd": [inp.get("name")]},
    }


def _model_dtypes(ctx: Context, own: tuple[str, int | None] | None) -> dict[str, int] | None:
    """Parameters per dtype of the user model that holds the layer (``own``: its name
    ``model.fc2`` and frame); None when the layer is not inside a user model or the
    model has one dtype."""
    if own is None or "." not in own[0] or own[1] is None:
        return None
    row = frame_row(ctx.frames[own[1]], own[0].split(".")[0])
    model = ctx.resolve_row(row) if row is not None else None
    if model is None:
        return None
    counts: dict[str, int] = {}
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for _, p in named_parameters(model, MAX_WALK):  # no user code (R54)
        d = str(read_meta(p, torch, ("dtype",))["dtype"])
        counts[d] = counts.get(d, 0) + 1
    return counts if len(counts) > 1 else None


def _odd_dtype(ctx: Context, named: list[str]) -> Diagnosis:
    """Tensors of two dtypes in one operation: the minority dtype is the odd one out."""
    items = [
        c
        for c in involved(ctx)
        if _dtype_of(c) in named and not (c["kind"] == "tensor" and c.get("shape") == [])
    ]
    items = collapse(items, lambda child, mod: _dtype_of(child) == _dtype_of(mod) is not None)
    counts: dict[str, int] = {}
    for c in items:
        d = _dtype_of(c)
        if d is not None:
            counts[d] = counts.get(d, 0) + 1
    base: Diagnosis = {
        "category": "dtype_mismatch",
        "title": "Dtype mismatch",
        "hints": ["NumPy arrays are float64 by default: `torch.from_numpy(a).float()`."],
    }
    if len(counts) < 2:
        return {
            **base,
            "headline": f"Tensors of dtype {' and '.join(named)} were mixed in one operation"
            if len(named) >= 2
            else "A tensor has the wrong dtype for this operation",
            "culprits": [],
            "remedy": "Convert one side so both match, e.g. `x = x.float()` (float32) or "
            "`x = x.to(other.dtype)`.",
            "facts": {"dtypes": named},
        }
    win = majority(counts, model=model_value(items, _dtype_of), rank=lambda v: v != "float32")
    odd = split(items, _dtype_of, win)
    rest = [c for c in items if c not in odd]
    odd_v = join(list(dict.fromkeys(str(_dtype_of(c)) for c in odd)))
    steps = [_convert(c, win) for c in odd[:3]]
    more = f" (and the other {len(odd) - 3})" if len(odd) > 3 else ""
    return {
        **base,
        "headline": sentence(odd, rest, odd_v, win, noun="weights", on=""),
        "culprits": odd + rest,
        "remedy": f"Convert {'it' if len(odd) == 1 else 'them'} to {win}: "
        + ", ".join(steps)
        + more
        + ".",
        "facts": {"dtypes": named, "expected": win, "odd": [c.get("name") for c in odd]},
    }


def _dtype_of(c: Row) -> str | None:
    if c.get("kind") == "tensor":
        d = c.get("dtype")
        return d if isinstance(d, str) and d != "n/a" else None
    ds = c.get("dtypes")
    return ds[0] if isinstance(ds, list) and len(ds) == 1 and isinstance(ds[0], str) else None


def _convert(c: Row, to: str) -> str:
    """```x = x.float()``` for a tensor, ```model.to(torch.float32)``` for a module."""
    method = _METHOD.get(to)
    conv = f".{method}()" if method else f".to(torch.{to})"
    if c.get("kind") == "module":
        name = code_path(str(c["name"])) if c.get("named", True) else "model"
        return f"`{name}.to(torch.{to})`"
    if not c.get("named", True):
        return f"{c.get('role', 'the tensor')} with `{conv}` where it is made"
    kept = c.get("_kept_as")
    name = str(kept["name"]) if isinstance(kept, dict) else str(c["name"])
    return f"`{name} = {name}{conv}`"


def _index_dtype(ctx: Context) -> Diagnosis | None:
    """An index tensor of a dtype indices cannot have: float token ids into an
    ``Embedding``, int32 labels into ``one_hot``, int16 into ``gather``."""
    m = first_match(_INDEX_PATTERNS, ctx.message)
    if m is None:
        return None
    what = m.group(1)
    want = {"int64"} if what in ("one_hot", "scatter") else {"int64", "int32"}
    layer = library_frame(ctx, self_types=("Embedding",))
    if layer is not None:
        label, _ = layer_label(ctx, layer)
        cands = [c for c in library_args(ctx, layer) if c.get("arg") == "input"]
    else:
        label = f"`{what}`" if what != "indices" else "the operation"
        # The data tensor of `gather`/`index_select` may be float: only integer tensors
        # of the wrong width are candidates (and any tensor for `one_hot`, which has one).
        cands = [
            c
            for c in involved(ctx)
            if c["kind"] == "tensor"
            and (what == "one_hot" or str(c.get("dtype")).startswith(("int", "uint")))
        ]
    bad = [c for c in cands if c.get("dtype") not in want]
    if len(bad) != 1:
        return None
    c = bad[0]
    who = user_name_or(c, "The index tensor")
    return {
        "category": "dtype_mismatch",
        "title": "Index dtype",
        "headline": f"{who} is {c.get('dtype')}, but {label} needs "
        f"{' or '.join(sorted(want, reverse=True))} indices",
        "culprits": [c],
        "remedy": f"Convert the indices: {_convert(c, 'int64')}.",
        "facts": {"expected": "int64", "odd": [c.get("name")]},
    }
