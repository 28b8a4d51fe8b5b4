"""``summarize``: one value as one row of a locals table, from metadata only (R17, R21).

Dispatches on the value's kind to a filler (``torch_rows``, ``plain_rows``; the two whose
rows nest rows, containers and TensorDatasets, are here, so nothing imports back into
this module); a filler that fails leaves the row with ``"text": "n/a"``. Reads never
warn the user.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Collection
from typing import Any

from ...safe_read import MAX_ITEMS, NA, type_name
from .kinds import (
    ARRAY,
    BYTES,
    CLASS,
    CONTAINER,
    DATALOADER,
    DATASET,
    FUNCTION,
    MODULE,
    NONE,
    NUMBER,
    OBJECT,
    OPTIMIZER,
    PYMODULE,
    STRING,
    TENSOR,
    Classifier,
)
from .object_parts import part
from .plain_rows import (
    fill_array,
    fill_bytes,
    fill_none,
    fill_number,
    fill_other,
    fill_string,
)
from .torch_rows import fill_dataloader, fill_module, fill_optimizer, fill_tensor, safe_dataset_len


def summarize(value: object, cls: Classifier | None = None, *, depth: int = 0) -> dict[str, object]:
    """One row (without its name) describing ``value`` from metadata only.

    Never raises: a summarizer that fails leaves ``{"kind": ..., "type": ..., "text": "n/a"}``.
    """
    cls = cls or Classifier()
    kind = cls.kind(value)
    row: dict[str, object] = {"kind": kind, "type": type_name(value)}
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


# --- kinds whose rows nest rows (a container's or a TensorDataset's items) ------------


def fill_dataset(row: dict[str, object], ds: object, cls: Classifier, depth: int) -> None:
    row["_id"] = id(ds)
    data = sys.modules.get("torch.utils.data")
    length = safe_dataset_len(ds, data, cls)
    row["len"] = length
    if data is not None and type(ds) is data.TensorDataset:
        ts = part(ds, "tensors")
        if type(ts) is tuple:
            row["items"] = [summarize(t, cls, depth=depth + 1) for t in ts[:MAX_ITEMS]]
    row["text"] = f"{row['type']}, len {length}"


def fill_container(
    row: dict[str, object], c: Collection[object], cls: Classifier, depth: int
) -> None:
    row["_id"] = id(c)
    n = len(c)  # exact builtin container: a C length, no user code
    row["len"] = n
    if (type(c) is list or type(c) is tuple) and depth == 0 and n:
        head = c[:MAX_ITEMS]
        kinds = [cls.kind(x) for x in head]
        if any(k == TENSOR for k in kinds):
            row["items"] = [summarize(x, cls, depth=depth + 1) for x in head]
    row["text"] = f"{row['type']} of {n}"


# Any: each filler takes the type its kind names (a tensor, a module, a str, ...)
_FILLERS: dict[str, Callable[[dict[str, object], Any, Classifier, int], None]] = {
    TENSOR: fill_tensor,
    MODULE: fill_module,
    OPTIMIZER: fill_optimizer,
    DATASET: fill_dataset,
    DATALOADER: fill_dataloader,
    ARRAY: fill_array,
    NUMBER: fill_number,
    STRING: fill_string,
    BYTES: fill_bytes,
    NONE: fill_none,
    CONTAINER: fill_container,
    OBJECT: fill_other,
    FUNCTION: fill_other,
    CLASS: fill_other,
    PYMODULE: fill_other,
}
