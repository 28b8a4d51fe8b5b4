"""The last forward call of each watched root module and of each loss module, by reference.

A NaN is best explained at the step it happens, and the batch that made it is gone by the
time anybody looks. So a forward pre-hook (``with_kwargs=True``: HF-style
``model(input_ids=..., attention_mask=...)`` calls too) on each root of the tracks' plans
keeps its last call as a ``KeptCall``; the next call replaces it, so nothing older than
one step is held. Tensors are ``.detach()``ed — views of the batch the training loop holds
anyway, never copies (R25) — so an input that carries an autograd graph (a hidden state,
another model's output) does not keep that graph alive. Containers are walked two levels
deep. For each loss module of the namespace (``nn.modules.loss._Loss``: ``criterion``,
``loss_fn``) a forward hook keeps the target (the remaining arguments), the *shape* of its
input (the model's output is not held) and its output (the 0-d loss, detached): the
at-step diagnosis reads whether this step's loss itself was finite without recomputing it.

Cost: a few µs per forward call of a root (one small object, one detach per tensor
argument); nothing per submodule. Hooks are added when a plan is built or the namespace's
loss modules change, and every one is removed on unload. Compiled models: the outer
``OptimizedModule`` is hooked, never the module dynamo traces (R28), and a hook reached
from inside a compiled region does nothing (``torch.compiler.is_compiling()`` folds to a
constant when traced, so it adds no graph break). ScriptModules are skipped (R29).
Modules are keys of weak dictionaries (R24): a deleted model drops its kept call.
"""

from __future__ import annotations

import itertools
import sys
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from . import hook_guard
from .bad_step import KeptCall, KeptLoss

if TYPE_CHECKING:
    from torch.nn import Module
    from torch.utils.hooks import RemovableHandle

#: Container levels walked when detaching arguments (a list of dicts of tensors).
MAX_DEPTH = 2
#: Items detached per container (a huge list is kept as it is, by reference).
MAX_ITEMS = 64


def _detached(value: Any, depth: int = 0) -> Any:
    """``value`` with every tensor that requires grad detached (a view: same storage)."""
    from torch import Tensor

    return _detach(value, depth, Tensor)


def _detach(value: Any, depth: int, tensor: type[Any]) -> Any:
    if isinstance(value, tensor):
        return value.detach() if value.requires_grad else value
    if depth >= MAX_DEPTH:
        return value
    if type(value) in (tuple, list) and len(value) <= MAX_ITEMS:
        out = [_detach(v, depth + 1, tensor) for v in value]
        return tuple(out) if type(value) is tuple else out
    if type(value) is dict and len(value) <= MAX_ITEMS:
        return {k: _detach(v, depth + 1, tensor) for k, v in value.items()}
    return value


def _plain(values: Iterable[Any], tensor: type[Any]) -> bool:
    """Every value is a tensor without autograd history, or not a container: kept as is
    (the common case, a few hundred ns)."""
    for v in values:
        if isinstance(v, tensor):
            if v.requires_grad:
                return False
        elif type(v) in (tuple, list, dict):
            return False
    return True


class _Slot:
    """What one hooked module keeps (referenced by its hook and by the keeper)."""

    __slots__ = ("call", "handle", "loss", "name", "ref")

    def __init__(self, name: str, module: Module) -> None:
        self.name = name
        self.ref = weakref.ref(module)
        self.call: KeptCall | None = None
        self.loss: KeptLoss | None = None
        self.handle: RemovableHandle | None = None


def hook_target(module: Module, wrappers: dict[int, Module]) -> Module | None:
    """The module to hook for root ``module``: its ``torch.compile`` wrapper if the
    namespace holds one (``wrappers``: id of the wrapped module -> wrapper), itself when it
    runs eagerly, None for ScriptModules and modules compiled in place."""
    import torch

    outer = wrappers.get(id(module))
    if outer is not None:
        return outer
    if isinstance(module, torch.jit.ScriptModule):
        return None
    if getattr(module, "_compiled_call_impl", None) is not None:
        return None  # module.compile(): its hooks run inside the compiled call
    return module


def compile_wrappers(ns: dict[str, Any]) -> dict[int, Module]:
    """id(wrapped module) -> its ``OptimizedModule`` for the namespace's compiled models."""
    import torch

    out: dict[int, Module] = {}
    for v in list(ns.values()):
        if isinstance(v, torch.nn.Module):
            inner = getattr(v, "_orig_mod", None)
            if isinstance(inner, torch.nn.Module):
                out[id(inner)] = v
    return out


def loss_modules(ns: dict[str, Any]) -> list[tuple[str, Module]]:
    """(name, module) for the loss modules bound in the namespace."""
    loss_mod = sys.modules.get("torch.nn.modules.loss")
    base = getattr(loss_mod, "_Loss", None)
    if base is None:
        return []
    out: list[tuple[str, Module]] = []
    seen: set[int] = set()
    for k, v in list(ns.items()):
        if isinstance(k, str) and not k.startswith("_") and isinstance(v, base):
            if id(v) not in seen:
                seen.add(id(v))
                out.append((k, v))
    return out


class InputKeeper:
    """Keeps the last forward call of the hooked roots and loss modules."""

    def __init__(self, on_error: Callable[[str], None]) -> None:
        self._on_error = on_error
        self._roots: weakref.WeakKeyDictionary[Module, _Slot] = weakref.WeakKeyDictionary()
        self._losses: weakref.WeakKeyDictionary[Module, _Slot] = weakref.WeakKeyDictionary()
        #: Orders calls: a loss called after the model's forward belongs to that batch.
        self._counter = itertools.count(1)
        #: While set (the at-step probe re-runs a forward), calls are not kept.
        self.paused = False
        #: Modules handed to ``torch.jit.script``: never hooked again (hook_guard.py).
        self._scripted: weakref.WeakSet[Module] = weakref.WeakSet()
        from torch.compiler import is_compiling

        self._is_compiling = is_compiling

    # --- hook-up (training thread, at a plan check) -----------------------------------

    def sync(
        self, roots: Iterable[tuple[str, Module]], losses: Iterable[tuple[str, Module]]
    ) -> None:
        """Hook exactly these roots and loss modules (already hooked ones stay hooked and
        keep their last call; the others are unhooked and forgotten)."""
        self._sync(self._roots, list(roots), self._root_hook)
        self._sync(self._losses, list(losses), self._loss_hook)

    def _sync(
        self,
        table: weakref.WeakKeyDictionary[Module, _Slot],
        wanted: list[tuple[str, Module]],
        make: Callable[[Module, _Slot], RemovableHandle],
    ) -> None:
        keep = {id(m) for _, m in wanted}
        for module, slot in list(table.items()):
            if id(module) not in keep:
                del table[module]
                _remove(slot)
        for name, module in wanted:
            old = table.get(module)
            if old is not None:
                old.name = name
                continue
            if module in self._scripted or not hook_guard.guardable(module):
                continue
            slot = _Slot(name, module)
            try:
                slot.handle = make(module, slot)
                # Out of torch.save / deepcopy / torch.jit.script of the module (R29).
                hook_guard.protect(module, slot.handle.id, self._on_script)
            except Exception:
                _remove(slot)
                self._on_error("grads:inputs")
                continue
            table[module] = slot

    def _on_script(self, module: Module) -> None:
        """``torch.jit.script`` reached ``module``: unhook it, and keep it unhooked."""
        self._scripted.add(module)
        for table in (self._roots, self._losses):
            slot = table.pop(module, None)
            if slot is not None:
                _remove(slot)

    def _root_hook(self, module: Module, slot: _Slot) -> RemovableHandle:
        from torch import Tensor

        counter, compiling = self._counter, self._is_compiling

        def keep_call(mod: Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if self.paused or compiling():
                return
            try:
                if not _plain(args, Tensor):
                    args = _detach(args, 0, Tensor)
                if kwargs and not _plain(kwargs.values(), Tensor):
                    kwargs = _detach(kwargs, 0, Tensor)
                slot.call = KeptCall(args, kwargs, next(counter))
            except Exception:
                self._on_error("grads:inputs")

        return module.register_forward_pre_hook(keep_call, with_kwargs=True)

    def _loss_hook(self, module: Module, slot: _Slot) -> RemovableHandle:
        counter, compiling = self._counter, self._is_compiling
        from torch import Tensor

        def keep_loss(
            mod: Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
        ) -> None:
            if compiling() or self.paused:
                return
            try:
                first = args[0] if args else None
                shape = tuple(first.shape) if isinstance(first, Tensor) else None
                slot.loss = KeptLoss(
                    slot.ref,
                    slot.name,
                    shape,
                    _detached(args[1:]),
                    _detached(kwargs),
                    output=output.detach() if isinstance(output, Tensor) else None,
                    call=next(counter),
                )
            except Exception:
                self._on_error("grads:inputs")

        return module.register_forward_hook(keep_loss, with_kwargs=True)

    # --- reading (training thread, at a bad step) --------------------------------------

    def call_of(self, module: Module, wrappers: dict[int, Module] | None = None) -> KeptCall | None:
        """The last call of root ``module`` (or of the wrapper hooked in its place)."""
        target = (wrappers or {}).get(id(module), module)
        slot = self._roots.get(target)
        return None if slot is None else slot.call

    def losses(self) -> list[KeptLoss]:
        return [s.loss for s in list(self._losses.values()) if s.loss is not None]

    def hooked(self) -> list[Module]:
        """The modules hooked now (tests)."""
        return [m for table in (self._roots, self._losses) for m in list(table.keys())]

    def clear(self) -> None:
        """Remove every hook and forget every kept call (unload)."""
        for table in (self._roots, self._losses):
            for slot in list(table.values()):
                _remove(slot)
            table.clear()


def _remove(slot: _Slot) -> None:
    handle, slot.handle = slot.handle, None
    slot.call = slot.loss = None
    if handle is not None:
        try:
            handle.remove()
            module = slot.ref()
            if module is not None:
                hook_guard.unprotect(module, handle.id)
        except Exception:
            pass
