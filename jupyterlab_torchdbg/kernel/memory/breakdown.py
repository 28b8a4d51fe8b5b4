"""Where the memory went: parameters, gradients, optimizer state, and everything else.

Models and optimizers come from ``watch()``, the notebook's namespace, and the optimizers
the step hook has seen (a model kept inside a trainer object is still found through its
optimizer's parameters). Nothing is kept: they are found again on every call and only
numbers come out (R24).

Every tensor is counted by its storage, once (``untyped_storage().data_ptr()`` per device):
tied weights, parameters that are views of one flat buffer, ``enc = model.encoder`` in the
namespace and the same parameter in two optimizers are counted once, in the first category
that reaches it (parameters, then gradients, then optimizer state). "Everything else"
(activations, data, caches, other tensors) is the allocator's allocated bytes minus those
on a CUDA device, and the process's resident memory minus those on the CPU.
Metadata only: no tensor data is read and nothing is allocated (R23).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module
    from torch.optim import Optimizer

    from ...protocol.messages import MemoryBreakdown, MemoryBreakdownRow

#: Tensors visited at most per breakdown (a bound for pathological namespaces).
MAX_TENSORS = 500_000
#: Modules walked at most per model (for submodule de-duplication).
MAX_MODULES = 20_000
CATEGORIES = ("parameters", "gradients", "optimizer_state")


@dataclass
class Found:
    """Models and optimizers for one breakdown, with the names the user knows them by."""

    models: list[tuple[str, Module]] = field(default_factory=list)
    optimizers: list[tuple[str, Optimizer]] = field(default_factory=list)


def _types() -> tuple[type[Tensor] | None, type[Module] | None, type[Optimizer] | None]:
    torch = sys.modules.get("torch")
    nn = sys.modules.get("torch.nn")
    optim = sys.modules.get("torch.optim")
    return (
        getattr(torch, "Tensor", None),
        getattr(nn, "Module", None),
        getattr(optim, "Optimizer", None),
    )


def discover(
    ns: dict[str, object] | None,
    *,
    watched: Iterable[tuple[Module | None, Optimizer | None]] = (),
    seen_optimizers: Iterable[Optimizer] = (),
) -> Found:
    """Top-level models (submodules of another found model dropped) and optimizers.

    ``watched``: (model, optimizer-or-None) pairs from ``watch()``; ``seen_optimizers``:
    optimizers that stepped while the extension was loaded.
    """
    _, module_t, optim_t = _types()
    found = Found()
    if module_t is None:
        return found
    models: dict[int, tuple[str, Module]] = {}
    optims: dict[int, tuple[str, Optimizer]] = {}
    for k, v in list((ns or {}).items()):
        if not isinstance(k, str) or k.startswith("_"):
            continue
        if isinstance(v, module_t):
            models.setdefault(id(v), (k, v))
        elif optim_t is not None and isinstance(v, optim_t):
            optims.setdefault(id(v), (k, v))
    for n, (model, opt) in enumerate(watched):
        if model is not None:
            models.setdefault(id(model), (f"watched[{n}] {type(model).__name__}", model))
        if opt is not None:
            optims.setdefault(id(opt), (f"watched[{n}] {type(opt).__name__}", opt))
    for n, opt in enumerate(seen_optimizers):
        optims.setdefault(id(opt), (f"{type(opt).__name__}#{n}", opt))
    found.models = _top_level(list(models.values()))
    found.optimizers = list(optims.values())
    return found


def _top_level(models: list[tuple[str, Module]]) -> list[tuple[str, Module]]:
    """Drop models that are submodules of another (``enc = model.encoder``)."""
    inner: set[int] = set()
    for _, m in models:
        try:
            for n, sub in enumerate(m.modules()):
                if n > MAX_MODULES:
                    break
                if sub is not m:
                    inner.add(id(sub))
        except Exception:
            continue
    return [(k, m) for k, m in models if id(m) not in inner]


def _storage(t: Tensor) -> tuple[str, int, int] | None:
    """(device, storage address, storage bytes) of a dense tensor, or None."""
    try:
        s = t.untyped_storage()
        ptr = int(s.data_ptr())
        if ptr == 0:  # meta / empty storage: nothing allocated
            return None
        return str(t.device), ptr, int(s.nbytes())
    except Exception:
        return None  # sparse, DTensor and subclasses without a plain storage


def _optimizer_state_tensors(opt: object, tensor_t: type[Tensor]) -> Iterator[Tensor]:
    state = getattr(opt, "state", None)
    if not isinstance(state, dict):
        return
    for per_param in list(state.values()):
        if isinstance(per_param, dict):
            values = list(per_param.values())
        elif isinstance(per_param, (list, tuple)):
            values = list(per_param)
        else:
            values = [per_param]
        for v in values:
            if isinstance(v, tensor_t):
                yield v
            elif isinstance(v, (list, tuple)):  # e.g. LBFGS keeps lists of tensors
                yield from (x for x in v if isinstance(x, tensor_t))


def _optimizer_params(opt: object, tensor_t: type[Tensor]) -> Iterator[Tensor]:
    groups = getattr(opt, "param_groups", None)
    if not isinstance(groups, list):
        return
    for g in groups:
        params = g.get("params", []) if isinstance(g, dict) else []
        for p in params:
            if isinstance(p, tensor_t):
                yield p


def compute(
    found: Found,
    *,
    allocated: dict[str, int | None] | None = None,
    rss: int | None = None,
    max_tensors: int = MAX_TENSORS,
    own: Callable[[object], bool] | None = None,
) -> MemoryBreakdown:
    """The breakdown per device (a ``MemoryBreakdown`` of the protocol).

    ``allocated``: the allocator's allocated bytes per CUDA device ("cuda:0": n);
    ``rss``: this process's resident memory (the CPU row's total).
    ``own``: when training runs on several threads, which parameters and optimizers this
    thread may read the gradients and state of (R34): reading ``p.grad`` while another
    thread's ``backward()`` writes it is a data race inside torch that can crash the
    process. The others are left out and counted in ``skipped_grads``.
    """
    t0 = time.perf_counter()
    tensor_t, _, _ = _types()
    tally = _Tally(max_tensors)
    skipped = 0
    if tensor_t is not None:
        categories, skipped = _by_category(found, own, tensor_t)
        for category, tensors in categories:
            for t in tensors:
                if not tally.add(category, t):
                    break
        del categories
    return {
        "devices": _rows(tally.per, allocated, rss),
        "models": [k for k, _ in found.models][:50],
        "optimizers": [k for k, _ in found.optimizers][:50],
        "tensors": min(tally.visited, max_tensors),
        "truncated": tally.truncated,
        "reason": None
        if found.models or found.optimizers
        else "no nn.Module or optimizer in the notebook's namespace (or watch() one)",
        "cost_ms": round((time.perf_counter() - t0) * 1000, 2),
        "skipped_grads": skipped,
    }


class _Tally:
    """Bytes per device and category, each storage counted once (views and tied weights
    share one), over at most ``limit`` tensors."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set[tuple[str, int]] = set()
        self.per: dict[str, dict[str, int]] = {}
        self.visited = 0
        self.truncated = False

    def add(self, category: str, t: Tensor) -> bool:
        """Count ``t``; False once the limit is reached (the caller stops)."""
        self.visited += 1
        if self.visited > self.limit:
            self.truncated = True
            return False
        st = _storage(t)
        if st is None:
            return True
        dev, ptr, nbytes = st
        if (dev, ptr) in self.seen:
            return True
        self.seen.add((dev, ptr))
        self.per.setdefault(dev, dict.fromkeys(CATEGORIES, 0))[category] += nbytes
        return True


def _by_category(
    found: Found, own: Callable[[object], bool] | None, tensor_t: type[Tensor]
) -> tuple[list[tuple[str, Iterable[Tensor]]], int]:
    """The tensors of each category (parameters and buffers, the gradients and optimizer
    states this thread may read), and how many parameters' gradients were left out."""
    params: list[Tensor] = []
    for _, model in found.models:
        try:
            params.extend(model.parameters())
            params.extend(model.buffers())  # running stats etc.: part of the model's state
        except Exception:
            continue
    for _, opt in found.optimizers:
        params.extend(_optimizer_params(opt, tensor_t))
    mine = params if own is None else [p for p in params if own(p)]
    optimizers = [o for o in found.optimizers if own is None or own(o[1])]
    categories: list[tuple[str, Iterable[Tensor]]] = [
        ("parameters", params),
        ("gradients", _grads(mine)),
        ("optimizer_state", _states(optimizers, tensor_t)),
    ]
    return categories, len(params) - len(mine)


def _rows(
    per: dict[str, dict[str, int]], allocated: dict[str, int | None] | None, rss: int | None
) -> list[MemoryBreakdownRow]:
    """One row per device (the CPU first): the categories counted, and what the total
    (the allocator's allocated bytes, the CPU's resident memory) leaves as "other"."""
    devices = sorted(set(per) | {d for d, v in (allocated or {}).items() if v is not None})
    if "cpu" not in devices:
        devices.insert(0, "cpu")
    rows: list[MemoryBreakdownRow] = []
    for dev in sorted(devices, key=_device_key):
        row = per.get(dev, dict.fromkeys(CATEGORIES, 0))
        known = sum(row.values())
        total: int | None
        source: Literal["allocated", "rss"] | None
        if dev == "cpu":
            total, source = rss, "rss" if rss is not None else None
        else:
            total = (allocated or {}).get(dev)
            source = "allocated" if total is not None else None
        rows.append(
            {
                "device": dev,
                "parameters": row["parameters"],
                "gradients": row["gradients"],
                "optimizer_state": row["optimizer_state"],
                "other": None if total is None else max(0, total - known),
                "total": total,
                "total_source": source,
            }
        )
    return rows


def _grads(params: list[Tensor]) -> Iterator[Tensor]:
    for p in params:
        try:
            g = p.grad
        except Exception:
            continue
        if g is not None:
            yield g


def _states(optimizers: list[tuple[str, Optimizer]], tensor_t: type[Tensor]) -> Iterator[Tensor]:
    for _, opt in optimizers:
        try:
            yield from _optimizer_state_tensors(opt, tensor_t)
        except Exception:
            continue


def _device_key(dev: str) -> tuple[int, str, int]:
    kind, _, idx = dev.partition(":")
    return (0 if kind == "cpu" else 1, kind, int(idx) if idx.isdigit() else -1)


def device_row(breakdown: MemoryBreakdown | None, device: str) -> MemoryBreakdownRow | None:
    if not breakdown:
        return None
    return next((r for r in breakdown.get("devices", []) if r.get("device") == device), None)
