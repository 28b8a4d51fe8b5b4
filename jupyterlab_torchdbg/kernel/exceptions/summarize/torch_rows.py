"""Rows for torch objects: tensors, modules, optimizers, datasets and data loaders.

Read through their metadata (shape, dtype, device, parameter counts, ``__dict__``
entries) only. Data is read only where it is cheap and cannot touch a device: the finite
check and the integer min/max run on small, dense CPU tensors of the exact
``torch.Tensor`` / ``nn.Parameter`` types (a subclass could run arbitrary code in
``__torch_function__``). No CUDA call is ever made, so a sticky CUDA error (R22) or an
OOM (R23) is safe (R21).
"""

from __future__ import annotations

import math
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .kinds import TENSOR, Classifier
from .safe_read import (
    MAX_PARAMS,
    NA,
    SMALL_NUMEL,
    dtype_name,
    exact_bool,
    json_int,
    try_read,
    type_module,
    type_name,
)

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module


def fill_tensor(row: dict[str, Any], t: Tensor, cls: Classifier, depth: int) -> None:
    torch = cls.torch
    row["_id"] = id(t)
    shape = try_read(lambda: [json_int(d) for d in t.shape])
    dtype = try_read(lambda: dtype_name(t.dtype))
    device = try_read(lambda: str(t.device))
    layout = try_read(lambda: dtype_name(t.layout))
    requires_grad = try_read(lambda: bool(t.requires_grad))
    is_leaf = try_read(lambda: bool(t.is_leaf))
    row.update(
        shape=shape,
        dtype=dtype,
        device=device,
        layout=layout,
        requires_grad=requires_grad,
        is_leaf=is_leaf,
    )
    # .grad of a non-leaf is None unless retain_grad() was called; reading it only warns.
    row["grad"] = try_read(lambda: t.grad is not None)
    row["version"] = try_read(lambda: int(t._version))
    numel = try_read(lambda: int(t.numel()))
    itemsize = try_read(lambda: int(t.element_size()))
    if isinstance(numel, int) and isinstance(itemsize, int):
        row["nbytes"] = json_int(numel * itemsize)
    exact = torch is not None and type(t) in (torch.Tensor, torch.nn.Parameter)
    row["finite"] = None
    if (
        exact
        and torch is not None  # (implied by exact; for the type checker)
        and device == "cpu"
        and layout == "strided"
        and isinstance(numel, int)
        and numel <= SMALL_NUMEL
    ):
        _fill_values(row, t, torch, numel)
    row["text"] = _tensor_text(row)


def _fill_values(row: dict[str, Any], t: Tensor, torch: ModuleType, numel: int) -> None:
    """Finite flag (float/complex) or min/max (integers) of a small dense CPU tensor."""
    with torch.no_grad():
        d = t.detach()
        if d.is_floating_point() or d.is_complex():
            row["finite"] = bool(torch.isfinite(d).all()) if numel else True
        elif d.dtype != torch.bool:
            row["finite"] = True
            if numel:
                row["min"] = json_int(d.min())
                row["max"] = json_int(d.max())
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


def fill_module(row: dict[str, Any], m: Module, cls: Classifier, depth: int) -> None:
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
            dtypes.add(dtype_name(p.dtype))
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
        row["params"] = json_int(count)
        row["params_complete"] = complete
        row["devices"] = sorted(devices)
        row["dtypes"] = sorted(dtypes)
    row["training"] = try_read(lambda: exact_bool(m.training))
    if type_module(m).startswith("torch.nn."):
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


def _count_text(n: object) -> str:
    if not isinstance(n, int):
        return str(n)
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def fill_optimizer(row: dict[str, Any], o: object, cls: Classifier, depth: int) -> None:
    row["_id"] = id(o)
    groups = o.__dict__.get("param_groups") if type(o.__dict__) is dict else None
    if type(groups) is list:
        row["groups"] = len(groups)
        n = 0
        devices: set[str] = set()
        lr: object = NA
        for i, g in enumerate(groups[:64]):
            if type(g) is not dict:
                continue
            ps = g.get("params")
            if type(ps) is list:
                n += len(ps)
                for p in ps[:MAX_PARAMS]:
                    devices.add(try_read(lambda: str(p.device)))
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


def safe_dataset_len(ds: object, data: ModuleType | None, cls: Classifier) -> int | str:
    """``len`` computed for dataset types whose length is plain data, else "n/a"."""
    if data is None:
        return NA
    try:
        if type(ds) is data.TensorDataset:
            ts = ds.__dict__["tensors"]
            return json_int(ts[0].shape[0]) if type(ts) is tuple and ts else NA
        if type(ds) is data.Subset:
            idx = ds.__dict__["indices"]
            if type(idx) in (list, range, tuple):
                return len(idx)
            if cls.kind(idx) == TENSOR:
                return json_int(idx.shape[0])
    except Exception:
        return NA
    return NA


def fill_dataloader(row: dict[str, Any], dl: object, cls: Classifier, depth: int) -> None:
    row["_id"] = id(dl)
    d = dl.__dict__ if type(dl.__dict__) is dict else {}
    bs = d.get("batch_size")
    row["batch_size"] = bs if type(bs) is int or bs is None else NA
    nw = d.get("num_workers")
    row["num_workers"] = nw if type(nw) is int else NA
    ds = d.get("dataset")
    row["dataset"] = type_name(ds)
    data = sys.modules.get("torch.utils.data")
    n = safe_dataset_len(ds, data, cls)
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
