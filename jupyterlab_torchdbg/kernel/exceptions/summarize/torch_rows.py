"""Rows for torch objects: tensors, modules, optimizers, datasets and data loaders.

Read through their metadata (shape, dtype, device, parameter counts, ``__dict__``
entries) only, and without running any of their code (R54): tensors through
``tensor_meta``, modules, optimizers and loaders through ``object_parts`` (an overridden
``parameters()`` or a ``__dict__`` property never runs; a DTensor never communicates).
Data is read only where it is cheap and cannot touch a device: the finite check and the
integer min/max run on small, dense CPU tensors of the exact ``torch.Tensor`` /
``nn.Parameter`` types (a subclass could run arbitrary code in ``__torch_function__``).
No CUDA call is ever made, so a sticky CUDA error (R22) or an OOM (R23) is safe (R21).
"""

from __future__ import annotations

import math
import sys
from types import ModuleType
from typing import TYPE_CHECKING

from ...safe_read import (
    MAX_PARAMS,
    NA,
    SMALL_NUMEL,
    json_int,
    type_module,
    type_name,
)
from .kinds import TENSOR, Classifier
from .object_parts import instance_dict, module_tensors, part
from .tensor_meta import is_distributed, local_shard, read_meta

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module


def fill_tensor(row: dict[str, object], t: Tensor, cls: Classifier, depth: int) -> None:
    torch = cls.torch
    row["_id"] = id(t)
    if torch is None:
        row["text"] = row["type"]
        return
    meta = read_meta(t, torch)  # C getters only: no subclass code runs (R54)
    row.update(
        shape=meta["shape"],
        dtype=meta["dtype"],
        device=meta["device"],
        layout=meta["layout"],
        requires_grad=meta["requires_grad"],
        is_leaf=meta["is_leaf"],
        grad=meta["grad"],
        version=meta["version"],
    )
    numel, itemsize = meta["numel"], meta["itemsize"]
    if isinstance(numel, int) and isinstance(itemsize, int):
        row["nbytes"] = json_int(numel * itemsize)
    exact = type(t) in (torch.Tensor, torch.nn.Parameter)
    row["finite"] = None
    if (
        exact
        and row["device"] == "cpu"
        and row["layout"] == "strided"
        and isinstance(numel, int)
        and numel <= SMALL_NUMEL
    ):
        _fill_values(row, t, torch, numel)
    text = _tensor_text(row)
    if is_distributed(type(t)):
        # DTensor: the wrapper's global metadata and, from its slot, the local shard;
        # no method of it runs, so no collective can start (R35).
        local = local_shard(t, torch)
        if local is not None:
            lm = read_meta(local, torch)
            text += f", local shard {_shape_text(lm['shape'])} on {lm['device']}"
    row["text"] = text


def _fill_values(row: dict[str, object], t: Tensor, torch: ModuleType, numel: int) -> None:
    """Finite flag (float/complex) or min/max (integers) of a small dense CPU tensor.

    These are torch operators: a torch-function mode the user left entered (or a dispatch
    mode) would run on them, so function modes are switched off and, with a dispatch mode
    on the stack, the values are not read (R54)."""
    stack_len = getattr(torch._C, "_len_torch_dispatch_stack", None)
    no_function_modes = getattr(torch._C, "DisableTorchFunction", None)
    if stack_len is None or no_function_modes is None or stack_len() > 0:
        return
    with no_function_modes(), torch.no_grad():  # (no_grad itself is seen by a mode)
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


def _shape_text(shape: object) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]" if isinstance(shape, list) else NA


def _tensor_text(row: dict[str, object]) -> str:
    shape_s = _shape_text(row.get("shape"))
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


_PARAM_FIELDS = ("numel", "device", "dtype")


def fill_module(row: dict[str, object], m: Module, cls: Classifier, depth: int) -> None:
    row["_id"] = id(m)
    torch = cls.torch
    count = 0
    devices: set[str] = set()
    dtypes: set[str] = set()
    complete = True
    seen = 0
    # From the _parameters / _buffers dicts: an overridden parameters() never runs (R54).
    for is_param, p in module_tensors(m, MAX_PARAMS + 1):
        seen += 1
        if seen > MAX_PARAMS or torch is None:
            complete = False
            break
        if not is_param:
            devices.add(str(read_meta(p, torch, ("device",))["device"]))
            continue
        meta = read_meta(p, torch, _PARAM_FIELDS)
        numel = meta["numel"]
        if not isinstance(numel, int):
            complete = False
        else:
            count += numel
        devices.add(str(meta["device"]))
        dtypes.add(str(meta["dtype"]))
    row["params"] = json_int(count)
    row["params_complete"] = complete
    row["devices"] = sorted(devices)
    row["dtypes"] = sorted(dtypes)
    training = part(m, "training")
    row["training"] = training if type(training) is bool else NA
    if type_module(m).startswith("torch.nn."):
        # Known torch layers: their size attributes are plain ints set in __init__.
        d = instance_dict(m)
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


def fill_optimizer(row: dict[str, object], o: object, cls: Classifier, depth: int) -> None:
    row["_id"] = id(o)
    od = instance_dict(o) or {}
    groups = od.get("param_groups")
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
                    devices.add(_device(p, cls))
            if i == 0 and type(g.get("lr")) in (int, float):
                lr = g["lr"]
        row["params"] = n
        row["devices"] = sorted(devices)
        row["lr"] = lr
    state = od.get("state")
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
            ts = part(ds, "tensors")
            return _first_dim(ts[0], cls) if type(ts) is tuple and ts else NA
        if type(ds) is data.Subset:
            idx = part(ds, "indices")
            if type(idx) is list or type(idx) is range or type(idx) is tuple:
                return len(idx)
            if cls.kind(idx) == TENSOR:
                return _first_dim(idx, cls)
    except Exception:
        return NA
    return NA


def fill_dataloader(row: dict[str, object], dl: object, cls: Classifier, depth: int) -> None:
    row["_id"] = id(dl)
    d = instance_dict(dl) or {}
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
            if type(sampler) is data.SequentialSampler or part(sampler, "_num_samples") is None:
                row["len"] = n // bs if d["drop_last"] else math.ceil(n / bs)
    row["text"] = f"DataLoader over {row['dataset']} (len {n}), batch_size {row['batch_size']}"


def _device(t: object, cls: Classifier) -> str:
    """A tensor's device as text, read without its code (R54); "n/a" if not a tensor."""
    if cls.torch is None or cls.kind(t) != TENSOR:
        return NA
    return str(read_meta(t, cls.torch, ("device",))["device"])


def _first_dim(t: object, cls: Classifier) -> int | str:
    if cls.torch is None or cls.kind(t) != TENSOR:
        return NA
    shape = read_meta(t, cls.torch, ("shape",))["shape"]
    return shape[0] if isinstance(shape, list) and shape else NA
