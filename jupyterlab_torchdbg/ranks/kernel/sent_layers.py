"""A rank's per-layer norms as its reports sent them (a list of numbers or ``packed``'s
string: ranks/wire/packed.py), read and checked when the kernel needs them
(``Rank.layers_at``), and the panel's view of them (``largest_first``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

from ...protocol.json_types import JsonValue
from ..wire import messages as w
from ..wire import packed
from .norms import norm_value, wire_norm

if TYPE_CHECKING:
    from ...protocol import messages as m


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


def layer_key(v: float | str | None) -> float:
    """Sort key: non-finite norms first, then the largest."""
    x = norm_value(v)
    if x is None:
        return math.inf
    return -math.inf if not math.isfinite(x) else -x


def largest_first(layers: w.Layers, limit: int) -> m.RankLayers:
    """The panel's layers: the largest first (non-finite ones before any), at most
    ``limit``."""
    names, values = layers["names"], layers.get("norms", [])
    order = sorted(range(len(names)), key=lambda i: layer_key(values[i]))[:limit]
    # the norms are ``wire_norm``'s: a float or one of its three strings
    return {
        "step": layers["step"],
        "names": [names[i] for i in order],
        "norms": [cast("m.FiniteOrSpecial", values[i]) for i in order],
    }
