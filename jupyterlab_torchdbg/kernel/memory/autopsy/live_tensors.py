"""The OOM autopsy's "largest live tensors": on the failing device, with the names that
reach them — the notebook's namespace, then every frame of the failing traceback.

Metadata only (storage sizes, shapes, addresses): nothing allocates device memory or
synchronises, and no tensor or frame is kept after ``largest_tensors`` returns (R23).
With training on several threads, only the gradients this thread owns are read (R34).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module

    from ....protocol.messages import OomTensor
    from ....protocol.messages import OomTensorKind as Kind
    from ....protocol.messages import OomTensorWhere as Where

#: Rows in the "largest live tensors" table.
MAX_TENSOR_ROWS = 15

#: Aliases listed per row.
MAX_ALIASES = 5

#: Traceback frames looked at.
MAX_FRAMES = 300

#: Names looked at per namespace/frame, and items per container.
MAX_NAMES = 200_000

MAX_ITEMS = 64

#: Parameters looked at per model.
MAX_PARAMS = 20_000

#: (name, where, function, lineno, kind, tensor)
Candidate: TypeAlias = "tuple[str, Where, str | None, int | None, Kind, Tensor]"


def _wants(device_type: str, index: int | None) -> Callable[[Tensor], bool]:
    def ok(t: Tensor) -> bool:
        d = t.device
        return bool(d.type == device_type and (index is None or d.index in (index, None)))

    return ok


def _candidates(
    ns: dict[str, object] | None,
    tb: TracebackType | None,
    tensor_t: type[Tensor],
    module_t: type[Module] | None,
    own: Callable[[object], bool] | None = None,
) -> Iterator[Candidate]:
    """(name, where, function, lineno, kind, tensor), namespace first, then the frames
    outermost first (the user's cell before the library internals). ``own``: whose
    ``.grad`` may be read from this thread (R34, see ``breakdown.compute``)."""

    def scan(
        items: Sequence[tuple[object, object]], where: Where, fn: str | None, line: int | None
    ) -> Iterator[Candidate]:
        for name, v in items[:MAX_NAMES]:
            if not isinstance(name, str) or name.startswith("__"):
                continue
            if isinstance(v, tensor_t):
                yield name, where, fn, line, "variable", v
                g = _leaf_grad(v) if own is None or own(v) else None
                if g is not None:
                    yield f"{name}.grad", where, fn, line, "gradient", g
            # Containers one level deep, through the base types' own iterators: a
            # subclass's __iter__/__getitem__ is user code and is never called (R21).
            elif isinstance(v, (list, tuple)):
                elems = list.__iter__(v) if isinstance(v, list) else tuple.__iter__(v)
                for i, x in enumerate(itertools.islice(elems, MAX_ITEMS)):
                    if isinstance(x, tensor_t):
                        yield f"{name}[{i}]", where, fn, line, "element", x
            elif isinstance(v, dict):
                for k, x in itertools.islice(dict.items(v), MAX_ITEMS):
                    # Exact str/int keys only: never repr() a user object (R21).
                    if isinstance(x, tensor_t) and type(k) in (str, int):
                        yield f"{name}[{repr(k)[:60]}]", where, fn, line, "element", x
            elif module_t is not None and isinstance(v, module_t) and where == "namespace":
                try:
                    for n, (pname, p) in enumerate(v.named_parameters()):
                        if n >= MAX_PARAMS:
                            break
                        yield f"{name}.{pname}", where, fn, line, "parameter", p
                        g = p.grad if own is None or own(p) else None
                        if g is not None:
                            yield f"{name}.{pname}.grad", where, fn, line, "gradient", g
                except Exception:
                    continue

    if ns:
        yield from scan(list(ns.items()), "namespace", None, None)
    n = 0
    while tb is not None and n < MAX_FRAMES:
        f = tb.tb_frame
        n += 1
        try:
            local = f.f_locals
            if local is not ns and local is not f.f_globals:
                yield from scan(list(local.items()), "frame", f.f_code.co_name, tb.tb_lineno)
        except Exception:
            pass
        tb = tb.tb_next
    del tb


def _leaf_grad(t: Tensor) -> Tensor | None:
    """``t.grad`` of a leaf (a non-leaf's ``.grad`` warns and is never populated)."""
    try:
        return t.grad if t.is_leaf else None
    except Exception:
        return None


def largest_tensors(
    ns: dict[str, object] | None,
    tb: TracebackType | None,
    device_type: str,
    index: int | None = None,
    limit: int = MAX_TENSOR_ROWS,
    own: Callable[[object], bool] | None = None,
) -> tuple[list[OomTensor], int, int]:
    """(rows, distinct storages, their bytes) for tensors on the device, largest first.

    A storage reached by several names is one row: the first name (namespace before
    frames), the rest in ``also``.
    """
    torch = sys.modules.get("torch")
    tensor_t = getattr(torch, "Tensor", None)
    module_t = getattr(getattr(torch, "nn", None), "Module", None)
    if tensor_t is None:
        return [], 0, 0
    wants = _wants(device_type, index)
    rows: dict[tuple[str, int], OomTensor] = {}
    for name, where, fn, line, kind, t in _candidates(ns, tb, tensor_t, module_t, own):
        try:
            if not wants(t):
                continue
            s = t.untyped_storage()
            key = (str(t.device), int(s.data_ptr()))
            if key[1] == 0:
                continue
            row = rows.get(key)
            if row is not None:
                if name != row["name"] and name not in row["also"]:
                    row["also"].append(name)
                continue
            rows[key] = {
                "name": name,
                "also": [],
                "kind": kind,
                "where": where,
                "function": fn,
                "lineno": line,
                "shape": [int(x) for x in t.shape],
                "dtype": str(t.dtype).removeprefix("torch."),
                "device": str(t.device),
                "nbytes": int(s.nbytes()),
                "requires_grad": bool(t.requires_grad),
                # An output of autograd (grad_fn set) is usually an activation kept alive
                # for backward: the first suspect when activations dominate.
                "grad_fn": t.grad_fn is not None,
            }
        except Exception:
            continue
    ordered = sorted(rows.values(), key=lambda r: -r["nbytes"])
    total = sum(r["nbytes"] for r in ordered)
    for r in ordered:
        more = len(r["also"]) - MAX_ALIASES
        r["also"] = r["also"][:MAX_ALIASES] + ([f"+{more} more"] if more > 0 else [])
    return ordered[:limit], len(ordered), total
