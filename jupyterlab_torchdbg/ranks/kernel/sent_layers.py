"""A rank's per-layer norms as its reports sent them (a list of numbers or ``packed``'s
string: ranks/wire/packed.py), read and checked when the kernel needs them
(``Rank.layers_at``: the desync alarm's first differing layer)."""

from __future__ import annotations

from typing import cast

from ...protocol.json_types import JsonValue
from ..wire import messages as w
from ..wire import packed
from .norms import wire_norm


def read_layers(step: int, names: JsonValue, norms: JsonValue, limit: int) -> w.Layers | None:
    """A worker's layers as sent (``norms``: a list of numbers or ``packed``'s string),
    checked: two sequences of one length, every norm a number, NaN or an infinity."""
    if not isinstance(names, list):
        return None
    values: list[float | str | None]
    if isinstance(norms, str):
        floats = packed.unpack(norms, limit)
        if floats is None or len(floats) != len(names):
            return None
        values = [wire_norm(x) for x in floats]
    elif isinstance(norms, list) and len(norms) == len(names):
        values = [wire_norm(x) for x in norms[:limit]]
        if any(v is None for v in values):
            return None
    else:
        return None
    return {
        "step": step,
        "names": [str(n)[:512] for n in names[:limit]],
        "norms": cast("list[w.Num]", values),
    }
