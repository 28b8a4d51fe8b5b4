"""Metadata-only summaries of frame locals (R17, R21).

A summary is a small dict of plain values the panel shows as one row of a locals table.
Nothing here calls ``repr``, ``str``, ``len``, ``bool`` or ``__eq__`` on a user object:
values are dispatched on their exact type, torch and numpy objects are read through
their metadata (shape, dtype, device, ...), and every other object is shown by its type
name only. Each field is read on its own, so a tensor subclass whose ``.shape`` raises
still shows its dtype; a field that raises becomes ``"n/a"``.

Data is read only where it is cheap and cannot touch a device: the finite check and the
integer min/max run on small, dense CPU tensors of the exact ``torch.Tensor`` /
``nn.Parameter`` types (a subclass could run arbitrary code in ``__torch_function__``).
No CUDA call is ever made, so a sticky CUDA error (R22) or an OOM (R23) is safe.

Rows carry an ``_id`` (``id()`` of the value) while a capture runs, so the diagnosis can
tell that the ``input`` of a library frame is the user's ``x``; ``strip_private`` removes
it before sending. Summaries never hold a reference to the value.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import Any

NA = "n/a"

#: Tensors with at most this many elements get a finite check / integer min-max.
SMALL_NUMEL = 100_000
#: Strings are shown up to this many characters.
MAX_STR = 120
#: Variable names are cut to this length.
MAX_NAME = 200
#: Tensor items shown inside a list/tuple (e.g. ``TensorDataset.tensors``).
MAX_ITEMS = 8
#: Parameters visited per module (param count, devices, dtypes); beyond it -> "at least".
MAX_PARAMS = 20_000
#: JavaScript numbers are exact up to 2**53; larger ints travel as text.
MAX_SAFE_INT = 2**53

# Kinds, in the order the locals table prefers them.
TENSOR, MODULE, OPTIMIZER, DATASET, DATALOADER = (
    "tensor",
    "module",
    "optimizer",
    "dataset",
    "dataloader",
)
ARRAY, NUMBER, STRING, BYTES, NONE, CONTAINER = (
    "array",
    "number",
    "string",
    "bytes",
    "none",
    "container",
)
OBJECT, FUNCTION, CLASS, PYMODULE = "object", "function", "class", "pymodule"

_RANK = {
    TENSOR: 1,
    MODULE: 1,
    OPTIMIZER: 1,
    DATASET: 1,
    DATALOADER: 1,
    ARRAY: 2,
    NUMBER: 2,
    STRING: 2,
    BYTES: 3,
    NONE: 3,
    CONTAINER: 2,
    OBJECT: 3,
    FUNCTION: 4,
    CLASS: 4,
    PYMODULE: 4,
}

#: Kinds left out of a module-level (notebook namespace) frame: imports, defs, classes.
NAMESPACE_NOISE = frozenset({FUNCTION, CLASS, PYMODULE})


def safe_text(value: str, limit: int = MAX_STR) -> tuple[str, bool]:
    """Cut ``value`` to ``limit`` characters and make it encodable (lone surrogates, R20).

    Returns the text and whether it was cut.
    """
    cut = len(value) > limit
    if cut:
        value = value[:limit]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value, cut


def type_name(value: Any) -> str:
    """The qualified name of ``type(value)``, read from the type (never the object)."""
    try:
        name = type(value).__qualname__
        return safe_text(name, MAX_NAME)[0] if isinstance(name, str) else NA
    except Exception:
        return NA


def _type_module(value: Any) -> str:
    try:
        mod = type(value).__module__
        return mod if isinstance(mod, str) else ""
    except Exception:
        return ""


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return NA


def _int(value: Any) -> int | str:
    """An int for JSON: exact when JavaScript can hold it, else its decimal text."""
    v = int(value)
    return v if -MAX_SAFE_INT <= v <= MAX_SAFE_INT else str(v)


class Classifier:
    """Maps a value to a kind by its exact type, caching per type for one capture.

    The torch and numpy classes are taken from ``sys.modules``: a kernel that never
    imported torch never imports it here.
    """

    def __init__(self) -> None:
        self._cache: dict[type, str] = {}
        torch = sys.modules.get("torch")
        self.torch = torch
        self._tensor = getattr(torch, "Tensor", None)
        nn = getattr(torch, "nn", None)
        self._module = getattr(nn, "Module", None)
        optim = getattr(torch, "optim", None)
        self._optimizer = getattr(optim, "Optimizer", None)
        data = sys.modules.get("torch.utils.data")
        self._dataset = getattr(data, "Dataset", None)
        self._dataloader = getattr(data, "DataLoader", None)
        numpy = sys.modules.get("numpy")
        self.numpy = numpy
        self._ndarray = getattr(numpy, "ndarray", None)
        self._npgeneric = getattr(numpy, "generic", None)

    def kind(self, value: Any) -> str:
        tp = type(value)
        k = self._cache.get(tp)
        if k is None:
            k = self._cache[tp] = self._kind_of_type(tp)
        return k

    def _kind_of_type(self, tp: type) -> str:
        import types

        if tp is type(None):
            return NONE
        if tp in (bool, int, float, complex):
            return NUMBER
        if tp is str:
            return STRING
        if tp in (bytes, bytearray):
            return BYTES
        if tp in (list, tuple, dict, set, frozenset):
            return CONTAINER
        if tp is types.ModuleType:
            return PYMODULE
        if tp in (
            types.FunctionType,
            types.BuiltinFunctionType,
            types.MethodType,
            types.BuiltinMethodType,
        ):
            return FUNCTION
        try:
            if issubclass(tp, type):
                return CLASS
            for base, kind in (
                (self._tensor, TENSOR),
                (self._module, MODULE),
                (self._optimizer, OPTIMIZER),
                (self._dataloader, DATALOADER),
                (self._dataset, DATASET),
                (self._ndarray, ARRAY),
            ):
                if base is not None and issubclass(tp, base):
                    return kind
            if self._npgeneric is not None and issubclass(tp, self._npgeneric):
                return NUMBER
        except Exception:  # a metaclass with a broken __subclasscheck__
            return OBJECT
        return OBJECT


def rank(kind: str) -> int:
    return _RANK.get(kind, 3)


def summarize(value: Any, cls: Classifier | None = None, *, depth: int = 0) -> dict[str, Any]:
    """One row (without its name) describing ``value`` from metadata only.

    Never raises: a summarizer that fails leaves ``{"kind": ..., "type": ..., "text": "n/a"}``.
    """
    cls = cls or Classifier()
    kind = cls.kind(value)
    row: dict[str, Any] = {"kind": kind, "type": type_name(value)}
    try:
        with warnings.catch_warnings():
            # e.g. reading .grad of a non-leaf warns; the user should never see our reads.
            warnings.simplefilter("ignore")
            fill = _FILLERS.get(kind)
            if fill is not None:
                fill(row, value, cls, depth)
            else:
                row["text"] = row["type"]
    except Exception:
        row["text"] = NA
    if "text" not in row:
        row["text"] = row["type"]
    return row


# --- per-kind fillers ---------------------------------------------------------------


def _dtype_name(dtype: Any) -> str:
    s = str(dtype)  # torch.dtype is a torch type, its str is safe
    return s[6:] if s.startswith("torch.") else s


def _fill_tensor(row: dict[str, Any], t: Any, cls: Classifier, depth: int) -> None:
    torch = cls.torch
    row["_id"] = id(t)
    shape = _try(lambda: [_int(d) for d in t.shape])
    dtype = _try(lambda: _dtype_name(t.dtype))
    device = _try(lambda: str(t.device))
    layout = _try(lambda: _dtype_name(t.layout))
    requires_grad = _try(lambda: bool(t.requires_grad))
    is_leaf = _try(lambda: bool(t.is_leaf))
    row.update(
        shape=shape,
        dtype=dtype,
        device=device,
        layout=layout,
        requires_grad=requires_grad,
        is_leaf=is_leaf,
    )
    # .grad of a non-leaf is None unless retain_grad() was called; reading it only warns.
    row["grad"] = _try(lambda: t.grad is not None)
    row["version"] = _try(lambda: int(t._version))
    numel = _try(lambda: int(t.numel()))
    itemsize = _try(lambda: int(t.element_size()))
    if isinstance(numel, int) and isinstance(itemsize, int):
        row["nbytes"] = _int(numel * itemsize)
    exact = torch is not None and type(t) in (torch.Tensor, torch.nn.Parameter)
    row["finite"] = None
    if (
        exact
        and device == "cpu"
        and layout == "strided"
        and isinstance(numel, int)
        and numel <= SMALL_NUMEL
    ):
        _fill_values(row, t, torch, numel)
    row["text"] = _tensor_text(row)


def _fill_values(row: dict[str, Any], t: Any, torch: Any, numel: int) -> None:
    """Finite flag (float/complex) or min/max (integers) of a small dense CPU tensor."""
    with torch.no_grad():
        d = t.detach()
        if d.is_floating_point() or d.is_complex():
            row["finite"] = bool(torch.isfinite(d).all()) if numel else True
        elif d.dtype != torch.bool:
            row["finite"] = True
            if numel:
                row["min"] = _int(d.min())
                row["max"] = _int(d.max())
        else:
            row["finite"] = True


def _tensor_text(row: dict[str, Any]) -> str:
    shape = row.get("shape")
    shape_s = "[" + ", ".join(str(d) for d in shape) + "]" if isinstance(shape, list) else NA
    parts = [f"{row.get('dtype', NA)}{shape_s}", str(row.get("device", NA))]
    if row.get("layout") not in ("strided", NA):
        parts.append(str(row["layout"]))
    if row.get("requires_grad") is True:
        parts.append("requires_grad")
    if row.get("grad") is True:
        parts.append("has grad")
    if row.get("finite") is False:
        parts.append("NON-FINITE")
    return " ".join(parts)


def _fill_module(row: dict[str, Any], m: Any, cls: Classifier, depth: int) -> None:
    row["_id"] = id(m)
    count = 0
    seen = 0
    devices: set[str] = set()
    dtypes: set[str] = set()
    complete = True
    try:
        for p in m.parameters():
            seen += 1
            if seen > MAX_PARAMS:
                complete = False
                break
            count += int(p.numel())
            devices.add(str(p.device))
            dtypes.add(_dtype_name(p.dtype))
        for b in m.buffers():
            seen += 1
            if seen > MAX_PARAMS:
                complete = False
                break
            devices.add(str(b.device))
    except Exception:
        row["params"] = NA
        row["devices"] = NA
        row["dtypes"] = NA
    else:
        row["params"] = _int(count)
        row["params_complete"] = complete
        row["devices"] = sorted(devices)
        row["dtypes"] = sorted(dtypes)
    row["training"] = _try(lambda: _exact_bool(m.training))
    if _type_module(m).startswith("torch.nn."):
        # Known torch layers: their size attributes are plain ints set in __init__.
        d = getattr(m, "__dict__", {})
        for attr in (
            "in_features",
            "out_features",
            "in_channels",
            "out_channels",
            "num_embeddings",
            "embedding_dim",
            "num_features",
            "normalized_shape",
            "inplace",
        ):
            v = d.get(attr) if type(d) is dict else None
            if type(v) in (int, bool):
                row[attr] = v
            elif type(v) is tuple and all(type(x) is int for x in v):
                row[attr] = list(v)
    devs = row.get("devices")
    where = ", ".join(devs) if isinstance(devs, list) and devs else "no parameters"
    extra = ""
    if "in_features" in row and "out_features" in row:
        extra = f" ({row['in_features']} -> {row['out_features']})"
    elif "in_channels" in row and "out_channels" in row:
        extra = f" ({row['in_channels']} -> {row['out_channels']} channels)"
    params = row.get("params")
    row["text"] = f"{row['type']}{extra}, {_count_text(params)} params on {where}"


def _count_text(n: Any) -> str:
    if not isinstance(n, int):
        return str(n)
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def _exact_bool(v: Any) -> bool | str:
    return v if type(v) is bool else NA


def _fill_optimizer(row: dict[str, Any], o: Any, cls: Classifier, depth: int) -> None:
    row["_id"] = id(o)
    groups = o.__dict__.get("param_groups") if type(o.__dict__) is dict else None
    if type(groups) is list:
        row["groups"] = len(groups)
        n = 0
        devices: set[str] = set()
        lr: Any = NA
        for i, g in enumerate(groups[:64]):
            if type(g) is not dict:
                continue
            ps = g.get("params")
            if type(ps) is list:
                n += len(ps)
                for p in ps[:MAX_PARAMS]:
                    devices.add(_try(lambda p=p: str(p.device)))
            if i == 0 and type(g.get("lr")) in (int, float):
                lr = g["lr"]
        row["params"] = n
        row["devices"] = sorted(devices)
        row["lr"] = lr
    state = o.__dict__.get("state")
    if state is not None and type(state).__module__ in ("collections", "builtins"):
        row["state_entries"] = dict.__len__(state) if isinstance(state, dict) else NA
    lr_text = f", lr={row['lr']:g}" if isinstance(row.get("lr"), (int, float)) else ""
    row["text"] = f"{row['type']}, {row.get('params', NA)} params{lr_text}"


def _fill_dataset(row: dict[str, Any], ds: Any, cls: Classifier, depth: int) -> None:
    row["_id"] = id(ds)
    data = sys.modules.get("torch.utils.data")
    length = _safe_dataset_len(ds, data, cls)
    row["len"] = length
    if data is not None and type(ds) is data.TensorDataset:
        ts = ds.__dict__.get("tensors")
        if type(ts) is tuple:
            row["items"] = [summarize(t, cls, depth=depth + 1) for t in ts[:MAX_ITEMS]]
    row["text"] = f"{row['type']}, len {length}"


def _safe_dataset_len(ds: Any, data: Any, cls: Classifier) -> Any:
    """``len`` computed for dataset types whose length is plain data, else "n/a"."""
    if data is None:
        return NA
    try:
        if type(ds) is data.TensorDataset:
            ts = ds.__dict__["tensors"]
            return _int(ts[0].shape[0]) if type(ts) is tuple and ts else NA
        if type(ds) is data.Subset:
            idx = ds.__dict__["indices"]
            if type(idx) in (list, range, tuple):
                return len(idx)
            if cls.kind(idx) == TENSOR:
                return _int(idx.shape[0])
    except Exception:
        return NA
    return NA


def _fill_dataloader(row: dict[str, Any], dl: Any, cls: Classifier, depth: int) -> None:
    row["_id"] = id(dl)
    d = dl.__dict__ if type(dl.__dict__) is dict else {}
    bs = d.get("batch_size")
    row["batch_size"] = bs if type(bs) is int or bs is None else NA
    nw = d.get("num_workers")
    row["num_workers"] = nw if type(nw) is int else NA
    ds = d.get("dataset")
    row["dataset"] = type_name(ds)
    data = sys.modules.get("torch.utils.data")
    n = _safe_dataset_len(ds, data, cls)
    row["dataset_len"] = n
    if isinstance(n, int) and type(bs) is int and bs > 0 and type(d.get("drop_last")) is bool:
        sampler = d.get("sampler")
        if data is not None and type(sampler) in (data.SequentialSampler, data.RandomSampler):
            if (
                type(sampler) is data.SequentialSampler
                or sampler.__dict__.get("_num_samples") is None
            ):
                row["len"] = n // bs if d["drop_last"] else math.ceil(n / bs)
    row["text"] = f"DataLoader over {row['dataset']} (len {n}), batch_size {row['batch_size']}"


def _fill_array(row: dict[str, Any], a: Any, cls: Classifier, depth: int) -> None:
    row["_id"] = id(a)
    if cls._ndarray is not None and type(a) is cls._ndarray:
        row["shape"] = _try(lambda: [_int(d) for d in a.shape])
        row["dtype"] = _try(lambda: str(a.dtype))
        shape = row["shape"]
        shape_s = "[" + ", ".join(str(d) for d in shape) + "]" if isinstance(shape, list) else NA
        row["text"] = f"ndarray {row['dtype']}{shape_s}"
    else:
        row["text"] = row["type"]


def _fill_number(row: dict[str, Any], v: Any, cls: Classifier, depth: int) -> None:
    if type(v) not in (bool, int, float, complex):
        # numpy scalar: .item() gives a Python number (numpy's own type; no user code)
        if _type_module(v) != "numpy":
            row["text"] = row["type"]
            return
        v = v.item()
    if type(v) is bool:
        row["value"] = v
        row["text"] = "True" if v else "False"
    elif type(v) is int:
        row["value"] = _int(v) if abs(v) < 10**300 else NA
        row["text"] = int.__repr__(v) if abs(v) < 10**40 else f"int with {v.bit_length()} bits"
    elif type(v) is float:
        row["value"] = v  # NaN/inf are encoded by protocol.jsonable
        row["finite"] = math.isfinite(v)
        row["text"] = float.__repr__(v)
    elif type(v) is complex:
        row["text"] = complex.__repr__(v)
    else:
        row["text"] = row["type"]


def _fill_string(row: dict[str, Any], s: str, cls: Classifier, depth: int) -> None:
    text, cut = safe_text(s, MAX_STR)
    row["value"] = text
    row["len"] = len(s)
    row["truncated"] = cut
    row["text"] = text + ("…" if cut else "")


def _fill_bytes(row: dict[str, Any], b: Any, cls: Classifier, depth: int) -> None:
    row["len"] = len(b)  # exact bytes/bytearray: a C length
    row["text"] = f"{row['type']} of {len(b)} bytes"


def _fill_none(row: dict[str, Any], v: Any, cls: Classifier, depth: int) -> None:
    row["text"] = "None"


def _fill_container(row: dict[str, Any], c: Any, cls: Classifier, depth: int) -> None:
    row["_id"] = id(c)
    n = len(c)  # exact builtin container: a C length, no user code
    row["len"] = n
    if type(c) in (list, tuple) and depth == 0 and n:
        head = c[:MAX_ITEMS]
        kinds = [cls.kind(x) for x in head]
        if any(k == TENSOR for k in kinds):
            row["items"] = [summarize(x, cls, depth=depth + 1) for x in head]
    row["text"] = f"{row['type']} of {n}"


def _fill_other(row: dict[str, Any], v: Any, cls: Classifier, depth: int) -> None:
    row["text"] = row["type"]


_FILLERS: dict[str, Callable[[dict[str, Any], Any, Classifier, int], None]] = {
    TENSOR: _fill_tensor,
    MODULE: _fill_module,
    OPTIMIZER: _fill_optimizer,
    DATASET: _fill_dataset,
    DATALOADER: _fill_dataloader,
    ARRAY: _fill_array,
    NUMBER: _fill_number,
    STRING: _fill_string,
    BYTES: _fill_bytes,
    NONE: _fill_none,
    CONTAINER: _fill_container,
    OBJECT: _fill_other,
    FUNCTION: _fill_other,
    CLASS: _fill_other,
    PYMODULE: _fill_other,
}


# --- a frame's locals -----------------------------------------------------------------


def summarize_locals(
    items: Iterable[tuple[Any, Any]],
    *,
    limit: int,
    prefer: Iterable[str] = (),
    namespace: bool = False,
    hidden: Any = None,
    cls: Classifier | None = None,
    live: dict[int, Any] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Rows for at most ``limit`` locals, most useful first, and how many were eligible.

    ``prefer``: names on the failing line, kept first. ``namespace``: the frame is the
    notebook's global namespace, so IPython's own names (``In``, ``_3``, ``_i3``, names in
    ``hidden``), imports, functions and classes are left out. ``live`` collects the
    objects of kept rows by id for the diagnosis; the caller clears it.
    """
    cls = cls or Classifier()
    preferred = set(prefer)
    ranked: list[tuple[int, int, str, Any]] = []
    total = 0
    # The hot loop of a capture (10,000 locals): type-keyed cache, no method calls.
    cache = cls._cache
    kind_of = cls.kind
    rank_of = _RANK.get
    hide = hidden if namespace and hidden is not None else ()
    for i, (name, value) in enumerate(items):
        if type(name) is not str:
            continue
        kind = cache.get(type(value))
        if kind is None:
            try:
                kind = kind_of(value)
            except Exception:
                kind = OBJECT
        if namespace and name not in preferred:
            if name[:1] == "_" or name in hide or kind in NAMESPACE_NOISE:
                continue
        total += 1
        ranked.append((0 if name in preferred else rank_of(kind, 3), i, name, value))
    if len(ranked) > limit:
        import heapq

        # (rank, index) is unique, so tuples never compare the values themselves.
        ranked = heapq.nsmallest(limit, ranked)
    else:
        ranked.sort()
    rows: list[dict[str, Any]] = []
    for _, _, name, value in ranked:
        row = {"name": safe_text(name, MAX_NAME)[0], **summarize(value, cls)}
        if live is not None and "_id" in row:
            live[row["_id"]] = value
        rows.append(row)
    return rows, total


def strip_private(value: Any) -> Any:
    """Drop the capture-only keys (leading underscore) from nested rows."""
    if isinstance(value, dict):
        return {k: strip_private(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [strip_private(v) for v in value]
    return value
