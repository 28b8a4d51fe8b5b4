"""What the notebook's names hold, as numbers only (R49): the namespace scan of the search.

``scan(ns, deadline)`` looks at ``shell.user_ns`` (not ``_``-prefixed names, ``In``,
``Out``, modules, classes): tensors with an autograd graph (its node count, walked
breadth-first from ``grad_fn`` with a node cap), containers (list / tuple / dict / deque /
set, and the attributes one level deep of user objects such as ``model.cache``) holding
tensors, tensors kept by functions' closures and defaults and by modules' hooks. Only
metadata is read (``grad_fn``, ``next_functions``, ``untyped_storage().nbytes()``,
``data_ptr()``); what it returns is names and numbers, so nothing found is kept alive.
"""

from __future__ import annotations

import sys
import time
import types
from collections import deque
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module

    from ....protocol.messages import LeakHolderKind as HolderKind

#: What holds a leak (the protocol's ``LeakHolder.kind``).

#: Autograd nodes walked per graph at most.
NODE_CAP = 200_000
#: Elements looked at per container at most.
ITEM_CAP = 100_000
#: Submodules whose hooks are looked at, per module in the namespace.
MODULE_CAP = 2_000
_SKIP = {"In", "Out", "exit", "quit", "get_ipython"}


class Budget(Exception):
    """The search's time budget is spent."""


@dataclass
class Seen:
    """One holder as numbers: ``count`` tensors (graph: autograd nodes) and their bytes."""

    name: str
    kind: HolderKind
    count: int
    bytes: int | None
    graphs: bool = False
    capped: bool = False
    #: A bounded container (``deque(maxlen=...)``): its bound and its entries now.
    bound: int | None = None
    entries: int = 0


class Scan:
    def __init__(
        self, torch: types.ModuleType, deadline: float, clock: Callable[[], float]
    ) -> None:
        self.tensor: type[Tensor] = torch.Tensor
        self.module: type[Module] = torch.nn.Module
        self.deadline, self.clock = deadline, clock
        self.found: dict[str, Seen] = {}
        self._ticks = 0
        #: ids of what was counted (alive while the scan runs): one object seen under two
        #: names (``kept`` and ``model.kept``, a closure's cell) is one holder, named once.
        self._ids: set[int] = set()

    def first(self, obj: object) -> bool:
        """Whether ``obj`` is met for the first time in this scan."""
        if id(obj) in self._ids:
            return False
        self._ids.add(id(obj))
        return True

    def tick(self) -> None:
        self._ticks += 1
        if self._ticks % 256 == 0 and self.clock() > self.deadline:
            raise Budget

    # --- tensors -------------------------------------------------------------------------

    def nbytes(self, t: Tensor, storages: set[int]) -> int:
        try:
            st = t.untyped_storage()
            key = st.data_ptr()
            if key in storages:
                return 0
            storages.add(key)
            return int(st.nbytes())
        except Exception:
            return 0

    def graph(self, name: str, t: Tensor) -> None:
        fn = getattr(t, "grad_fn", None)
        if fn is None or not self.first(t):
            return
        seen = {id(fn)}
        todo = deque([fn])
        capped = False
        while todo:
            self.tick()
            node = todo.popleft()
            try:
                nexts = node.next_functions
            except Exception:
                continue
            for nxt, _ in nexts:
                if nxt is not None and id(nxt) not in seen:
                    if len(seen) >= NODE_CAP:
                        capped = True
                        break
                    seen.add(id(nxt))
                    todo.append(nxt)
            if capped:
                break
        del todo, fn
        self.found[name] = Seen(name, "graph", len(seen), None, True, capped)

    # --- containers ----------------------------------------------------------------------

    def _items(self, obj: Collection[object]) -> Iterator[object]:
        # a copy of at most ITEM_CAP items (islice): a huge container costs no more
        src = list(islice(obj.values() if isinstance(obj, dict) else obj, ITEM_CAP))
        yield from src

    def tensors(self, obj: object, depth: int, storages: set[int], acc: list[int]) -> None:
        """Tensors in ``obj`` (itself, or a container two levels deep): count, bytes,
        with a graph (``acc``)."""
        self.tick()
        if isinstance(obj, self.tensor):
            acc[0] += 1
            acc[1] += self.nbytes(obj, storages)
            if getattr(obj, "grad_fn", None) is not None:
                acc[2] += 1
            return
        if depth <= 0 or not isinstance(obj, (list, tuple, dict, deque, set, frozenset)):
            return
        for v in self._items(obj):
            self.tensors(v, depth - 1, storages, acc)

    def container(self, name: str, obj: object, kind: HolderKind = "container") -> None:
        if not self.first(obj):
            return
        acc = [0, 0, 0]
        self.tensors(obj, 3, set(), acc)
        if acc[0]:
            seen = self.found[name] = Seen(name, kind, acc[0], acc[1], acc[2] > 0)
            if isinstance(obj, deque) and obj.maxlen is not None:
                seen.bound, seen.entries = obj.maxlen, len(obj)

    # --- the namespace ---------------------------------------------------------------------

    def value(self, name: str, v: object, depth: int) -> None:
        self.tick()
        if isinstance(v, (types.ModuleType, type)):
            return
        if isinstance(v, self.tensor):
            self.graph(name, v)
        elif isinstance(v, (list, tuple, dict, deque, set, frozenset)):
            self.container(name, v)
        elif isinstance(v, types.FunctionType):
            self.function(name, v, "closure")
        elif isinstance(v, self.module):
            self.hooks(name, v)
            if depth > 0:
                self.attributes(name, v, depth)
        elif depth > 0 and not callable(v):
            self.attributes(name, v, depth)

    def attributes(self, name: str, obj: object, depth: int) -> None:
        try:
            attrs = vars(obj)
        except TypeError:
            return
        if not isinstance(attrs, dict):
            return
        for k, v in list(attrs.items())[:ITEM_CAP]:
            if isinstance(k, str) and not k.startswith("_"):
                self.value(f"{name}.{k}", v, depth - 1)

    def function(
        self, name: str, fn: types.FunctionType, kind: HolderKind, label: str = ""
    ) -> None:
        cells = fn.__closure__ or ()
        names = fn.__code__.co_freevars
        kept: list[tuple[str, object]] = []
        for var, cell in zip(names, cells, strict=False):
            try:
                kept.append((var, cell.cell_contents))
            except ValueError:
                continue  # an empty cell
        kept.extend((f"default {i}", d) for i, d in enumerate(fn.__defaults__ or ()))
        kept.extend((f"default {k}", d) for k, d in (fn.__kwdefaults__ or {}).items())
        for var, v in kept:
            if isinstance(v, (self.tensor, list, tuple, dict, deque, set, frozenset)):
                self.container(f"{label or name} (`{var}`)", v, kind)
        del kept

    def hooks(self, name: str, module: Module) -> None:
        try:
            subs = list(islice(module.named_modules(), MODULE_CAP))
        except Exception:
            return
        for sub, m in subs:
            where = f"{name}.{sub}" if sub else name
            for attr, what in (
                ("_forward_hooks", "forward hook"),
                ("_forward_pre_hooks", "forward pre-hook"),
                ("_backward_hooks", "backward hook"),
                ("_backward_pre_hooks", "backward pre-hook"),
            ):
                d = getattr(m, attr, None)
                if not isinstance(d, dict):
                    continue
                for hook in list(d.values()):
                    fn = getattr(hook, "__func__", hook)
                    if isinstance(fn, types.FunctionType) and not _ours(fn) and self.first(fn):
                        label = f"{what} `{fn.__name__}` on `{where}`"
                        self.function(where, fn, "hook", label)
        del subs


def _ours(fn: types.FunctionType) -> bool:
    return str(getattr(fn, "__module__", "") or "").startswith("jupyterlab_torchdbg")


def scan(
    ns: dict[str, object], budget_s: float, clock: Callable[[], float] = time.monotonic
) -> tuple[dict[str, Seen], bool]:
    """Holders found in ``ns`` within ``budget_s``; ``(found, complete)``."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}, True
    s = Scan(torch, clock() + budget_s, clock)
    for _ in range(3):
        try:
            items = list(ns.items())
            break
        except RuntimeError:  # the namespace changed while copied: again
            continue
    else:
        return {}, False
    try:
        for name, v in items:
            if not isinstance(name, str) or name.startswith("_") or name in _SKIP:
                continue
            try:
                s.value(name, v, 1)
            except Budget:
                raise
            except Exception:
                continue
    except Budget:
        return s.found, False
    finally:
        del items
    return s.found, True
