"""Rows for plain values: numbers, strings, bytes, None, builtin containers, numpy arrays,
and every other object (shown by its type name only).

Only exact builtin types are measured (``len`` of an exact list is a C length, no user
code); a numpy scalar is read with numpy's own ``.item()``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...safe_read import MAX_STR, NA, json_int, safe_text, try_read, type_module
from .kinds import Classifier

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


def fill_array(row: dict[str, object], a: NDArray[np.generic], cls: Classifier, depth: int) -> None:
    row["_id"] = id(a)
    if cls._ndarray is not None and type(a) is cls._ndarray:
        row["shape"] = try_read(lambda: [json_int(d) for d in a.shape])
        row["dtype"] = try_read(lambda: str(a.dtype))
        shape = row["shape"]
        shape_s = "[" + ", ".join(str(d) for d in shape) + "]" if isinstance(shape, list) else NA
        row["text"] = f"ndarray {row['dtype']}{shape_s}"
    else:
        row["text"] = row["type"]


# Any: a Python number or numpy's own scalar, whose numpy .item() is called below
def fill_number(row: dict[str, object], v: Any, cls: Classifier, depth: int) -> None:
    if type(v) not in (bool, int, float, complex):
        # numpy scalar: .item() gives a Python number (numpy's own types only; a subclass
        # could override it)
        scalars = getattr(cls.numpy, "sctypeDict", None)
        if (
            type_module(v) != "numpy"
            or type(scalars) is not dict
            or type(v) not in scalars.values()
        ):
            row["text"] = row["type"]
            return
        v = v.item()
    if type(v) is bool:
        row["value"] = v
        row["text"] = "True" if v else "False"
    elif type(v) is int:
        row["value"] = json_int(v) if abs(v) < 10**300 else NA
        row["text"] = int.__repr__(v) if abs(v) < 10**40 else f"int with {v.bit_length()} bits"
    elif type(v) is float:
        row["value"] = v  # NaN/inf are encoded by protocol.jsonable
        row["finite"] = math.isfinite(v)
        row["text"] = float.__repr__(v)
    elif type(v) is complex:
        row["text"] = complex.__repr__(v)
    else:
        row["text"] = row["type"]


def fill_string(row: dict[str, object], s: str, cls: Classifier, depth: int) -> None:
    text, cut = safe_text(s, MAX_STR)
    row["value"] = text
    row["len"] = len(s)
    row["truncated"] = cut
    row["text"] = text + ("…" if cut else "")


def fill_bytes(row: dict[str, object], b: bytes | bytearray, cls: Classifier, depth: int) -> None:
    row["len"] = len(b)  # exact bytes/bytearray: a C length
    row["text"] = f"{row['type']} of {len(b)} bytes"


def fill_none(row: dict[str, object], v: object, cls: Classifier, depth: int) -> None:
    row["text"] = "None"


def fill_other(row: dict[str, object], v: object, cls: Classifier, depth: int) -> None:
    row["text"] = row["type"]
