"""The last forward call of each watched root module and of each loss module, by reference.

A NaN is best explained at the step it happens, and the batch that made it is gone by the
time anybody looks. So a forward pre-hook (``with_kwargs=True``: HF-style
``model(input_ids=..., attention_mask=...)`` calls too) on each root of the tracks' plans
keeps its last call as a ``KeptCall``; the next call replaces it, so nothing older than
one step is held. Tensors are ``.detach()``ed — views of the batch the training loop holds
anyway, never copies (R25) — so an input that carries an autograd graph (a hidden state,
another model's output) does not keep that graph alive. Containers are walked two levels
deep. A forward hook on each root arms the backward-root watch on its output
(backward_root.py: what ``backward()`` is then called on, the loss however it was
computed) and keeps a weak reference to the model's own loss (``.loss``, a scalar
output). For each loss module of the namespace (``nn.modules.loss._Loss``: ``criterion``,
``loss_fn``; and a parameter-free module of the user's own class, kept only when it
returns a scalar) a forward hook keeps the target (the remaining arguments), the *shape*
of its input (the model's output is not held) and its output (the 0-d loss, detached).

Roots are hooked when a plan is built, and before any step: at a cell's start and at
``watch()`` the namespace's models with trainable parameters (and the watched ones) are
hooked as candidates (``sync``'s ``roots`` then include them), so the first step of a
training cell has its batch kept too. While a root's track skips non-finite steps, its
pre-hook also copies the normalisation running statistics at the first forward after
each step (norm_stats.py), so a skipped step can put them back.

Cost: a few µs per forward call of a root (one small object, one detach per tensor
argument, one autograd-node pre-hook); nothing per submodule. Every hook is switched by
module_hooks.py (R41): added and removed only when no thread is in a module call, a no-op
holding no batch from its removal on, and none added once the keeper is cleared (unload).
Compiled models: the outer ``OptimizedModule`` is hooked, never the module dynamo traces
(R28), and a hook reached from inside a compiled region does nothing
(``torch.compiler.is_compiling()`` folds to a constant when traced, so it adds no graph
break). ScriptModules are skipped (R29). Modules are keys of weak dictionaries (R24): a
deleted model drops its kept call.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, overload

from .. import hook_guard
from ..module_hooks import POST, PRE, HookSet, ModuleHook
from .backward_root import RootWatch
from .bad_step import KeptCall, KeptLoss, KeptRoot
from .loss_sources import is_torch_loss, output_nodes, scalar_with_grad
from .norm_stats import NormShadow

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module

#: Container levels walked when detaching arguments (a list of dicts of tensors).
MAX_DEPTH = 2
#: Items detached per container (a huge list is kept as it is, by reference).
MAX_ITEMS = 64


@overload
def _detach(value: tuple[object, ...], depth: int, tensor: type[Tensor]) -> tuple[object, ...]: ...
@overload
def _detach(value: dict[str, object], depth: int, tensor: type[Tensor]) -> dict[str, object]: ...
@overload
def _detach(value: object, depth: int, tensor: type[Tensor]) -> object: ...
def _detach(value: object, depth: int, tensor: type[Tensor]) -> object:
    if isinstance(value, tensor):
        return value.detach() if value.requires_grad else value
    if depth >= MAX_DEPTH:
        return value
    if (
        isinstance(value, (tuple, list))
        and type(value) in (tuple, list)
        and len(value) <= MAX_ITEMS
    ):
        out = [_detach(v, depth + 1, tensor) for v in value]
        return tuple(out) if type(value) is tuple else out
    if type(value) is dict and len(value) <= MAX_ITEMS:
        return {k: _detach(v, depth + 1, tensor) for k, v in value.items()}
    return value


def _plain(values: Iterable[object], tensor: type[Tensor]) -> bool:
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
    """What one hooked module keeps (referenced by its hooks and by the keeper)."""

    __slots__ = ("call", "epoch", "handle", "loss", "name", "norms", "out_handle", "ref")

    def __init__(self, name: str, module: Module, epoch: int = -1) -> None:
        self.name = name
        #: The keeper's step epoch it was hooked in (-1: before a step, at a scan).
        self.epoch = epoch
        self.ref = weakref.ref(module)
        self.call: KeptCall | None = None
        self.loss: KeptLoss | None = None
        self.handle: ModuleHook | None = None
        #: A root's forward hook (the backward-root watch, the model's own loss).
        self.out_handle: ModuleHook | None = None
        #: A root's normalisation statistics, copied while its track skips (R48).
        self.norms: NormShadow | None = None


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


def compile_wrappers(ns: Mapping[str, object]) -> dict[int, Module]:
    """id(wrapped module) -> its ``OptimizedModule`` for the namespace's compiled models."""
    import torch

    out: dict[int, Module] = {}
    for v in list(ns.values()):
        if isinstance(v, torch.nn.Module):
            inner = getattr(v, "_orig_mod", None)
            if isinstance(inner, torch.nn.Module):
                out[id(inner)] = v
    return out


class InputKeeper:
    """Keeps the last forward call of the hooked roots and loss modules, and what the
    last ``backward()`` was called on."""

    def __init__(self, on_error: Callable[[str], None]) -> None:
        self._on_error = on_error
        self._roots: weakref.WeakKeyDictionary[Module, _Slot] = weakref.WeakKeyDictionary()
        self._losses: weakref.WeakKeyDictionary[Module, _Slot] = weakref.WeakKeyDictionary()
        #: Orders calls: a loss called after the model's forward belongs to that batch.
        self._counter = itertools.count(1)
        self._paused = False
        #: Counts step boundaries (nonfinite.py); a root hooked in the current one was
        #: first seen at this very step, after its forward.
        self.epoch = 0
        #: Set while ``sync`` runs inside a step boundary (a plan check).
        self.in_step = False
        #: Modules handed to ``torch.jit.script``: never hooked again (hook_guard.py).
        self._scripted: weakref.WeakSet[Module] = weakref.WeakSet()
        from torch.compiler import is_compiling

        self._is_compiling = is_compiling
        #: What the last ``backward()`` was called on (backward_root.py).
        self.backward = RootWatch(lambda: next(self._counter), on_error)
        #: Learn the loss of CUDA models too: only while some track skips non-finite
        #: steps (else no step is checked at the step on CUDA, R26, and nobody reads it).
        self.roots_on_cuda = False
        #: Every module hook of the keeper (module_hooks.py: switched when safe, R41).
        self.hooks = HookSet(on_error, "grads:inputs", self._on_script)

    @property
    def paused(self) -> bool:
        """While set (the at-step probe or the replay re-runs a forward), nothing is kept."""
        return self._paused

    @paused.setter
    def paused(self, on: bool) -> None:
        self._paused = on
        self.backward.paused = on

    # --- hook-up (training thread at a plan check; the kernel's at a cell start) ------

    def sync(
        self,
        roots: Iterable[tuple[str, Module]],
        losses: Iterable[tuple[str, Module]],
        norms: Iterable[Module] = (),
    ) -> None:
        """Hook exactly these roots and loss modules (already hooked ones stay hooked and
        keep their last call; the others are unhooked and forgotten); copy the
        normalisation statistics of the roots in ``norms`` at each step's first forward.
        Nothing once closed (unload): a training thread still in the old step adds none."""
        if self.hooks.closed:
            return
        self._sync(self._roots, list(roots), self._root_hook)
        self._sync(self._losses, list(losses), self._loss_hook)
        wanted = {id(m) for m in norms}
        for module, slot in list(self._roots.items()):
            if id(module) not in wanted:
                slot.norms = None
            elif slot.norms is None:
                try:
                    slot.norms = NormShadow(module)
                except Exception:
                    self._on_error("grads:norms")

    def _sync(
        self,
        table: weakref.WeakKeyDictionary[Module, _Slot],
        wanted: list[tuple[str, Module]],
        make: Callable[[Module, _Slot], list[ModuleHook]],
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
            slot = _Slot(name, module, self.epoch if self.in_step else -1)
            try:
                # Out of torch.save / deepcopy / torch.jit.script once in torch's dicts
                # (module_hooks.py protects them, hook_guard.py, R29).
                handles = make(module, slot)
                if not handles:
                    continue  # closed meanwhile (unload)
                slot.handle = handles[0]
                slot.out_handle = handles[1] if len(handles) > 1 else None
            except Exception:
                _remove(slot)
                self._on_error("grads:inputs")
                continue
            table[module] = slot

    def _on_script(self, module: Module) -> None:
        """``torch.jit.script`` reached ``module`` (its hooks are gone already, taken out
        by module_hooks.py): forget it, and keep it unhooked."""
        self._scripted.add(module)
        for table in (self._roots, self._losses):
            slot = table.pop(module, None)
            if slot is not None:
                _remove(slot)

    def _root_hook(self, module: Module, slot: _Slot) -> list[ModuleHook]:
        from torch import Tensor

        counter, compiling, watch = self._counter, self._is_compiling, self.backward

        def keep_call(mod: Module, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
            if self._paused or compiling():
                return
            try:
                norms = slot.norms
                if norms is not None and norms.due:
                    norms.take()  # before this forward updates them
                if not _plain(args, Tensor):
                    args = _detach(args, 0, Tensor)
                if kwargs and not _plain(kwargs.values(), Tensor):
                    kwargs = _detach(kwargs, 0, Tensor)
                slot.call = KeptCall(args, kwargs, next(counter))
            except Exception:
                self._on_error("grads:inputs")

        def keep_output(mod: Module, args: tuple[object, ...], output: object) -> None:
            if self._paused or compiling():
                return
            try:
                tensors, loss = output_nodes(output, Tensor)
                if tensors and tensors[0].is_cuda and not self.roots_on_cuda:
                    return
                if loss is not None:
                    watch.mark(loss, "model", slot.name)
                for t in tensors:
                    watch.arm(t)
            except Exception:
                self._on_error("grads:inputs")

        return self.hooks.add([(module, PRE, keep_call, True), (module, POST, keep_output, False)])

    def _loss_hook(self, module: Module, slot: _Slot) -> list[ModuleHook]:
        counter, compiling = self._counter, self._is_compiling
        from torch import Tensor

        torch_loss = is_torch_loss(module)

        def keep_loss(
            mod: Module, args: tuple[object, ...], kwargs: dict[str, object], output: object
        ) -> None:
            if compiling() or self._paused:
                return
            try:
                if not torch_loss and not scalar_with_grad(output, Tensor):
                    return  # a module of the user's that returned no loss this time
                first = args[0] if args else None
                shape = tuple(first.shape) if isinstance(first, Tensor) else None
                out = output if isinstance(output, Tensor) else None
                slot.loss = KeptLoss(
                    slot.ref,
                    slot.name,
                    shape,
                    _detach(args[1:], 0, Tensor),
                    _detach(kwargs, 0, Tensor),
                    output=None if out is None else out.detach(),
                    call=next(counter),
                )
                if out is not None and out.grad_fn is not None:
                    self.backward.mark(out, "loss_module", slot.name)
            except Exception:
                self._on_error("grads:inputs")

        return self.hooks.add([(module, POST, keep_loss, True)])

    # --- reading (training thread, at a bad step) --------------------------------------

    def call_of(self, module: Module, wrappers: dict[int, Module] | None = None) -> KeptCall | None:
        """The last call of root ``module`` (or of the wrapper hooked in its place)."""
        target = (wrappers or {}).get(id(module), module)
        slot = self._roots.get(target)
        return None if slot is None else slot.call

    def losses(self) -> list[KeptLoss]:
        return [s.loss for s in list(self._losses.values()) if s.loss is not None]

    @property
    def root(self) -> KeptRoot | None:
        """What the last ``backward()`` was called on (None: not seen)."""
        return self.backward.root

    def norms_of(
        self, module: Module, wrappers: dict[int, Module] | None = None
    ) -> NormShadow | None:
        """The running-statistics copies of root ``module`` (None: not copied)."""
        target = (wrappers or {}).get(id(module), module)
        slot = self._roots.get(target)
        return None if slot is None else slot.norms

    def seen_first(self, module: Module, wrappers: dict[int, Module] | None = None) -> str:
        """Why root ``module`` has no kept call: "now" (hooked at this step, after its
        forward), "bypassed" (hooked earlier, its hooks never ran: ``model.forward(x)``
        called directly), "unhooked" (it cannot be: a ScriptModule ...)."""
        target = (wrappers or {}).get(id(module), module)
        slot = self._roots.get(target)
        if slot is None:
            return "unhooked"
        return "now" if slot.epoch == self.epoch else "bypassed"

    def want_norms(self, module: Module, wrapper: Module | None = None) -> None:
        """Copy root ``module``'s running statistics from its next forward on (a track
        that began skipping between two plan checks)."""
        target = wrapper if wrapper is not None else module
        slot = self._roots.get(target)
        if slot is not None and slot.norms is None:
            slot.norms = NormShadow(target)

    def hooked(self) -> list[Module]:
        """The modules hooked now (tests)."""
        return [m for table in (self._roots, self._losses) for m in list(table.keys())]

    def clear(self) -> None:
        """Remove every hook and forget every kept call (unload): each hook is a no-op at
        once and leaves torch's dicts when no thread is in a module call; no hook is
        added after this."""
        self.hooks.close()
        self.backward.closed = True
        self.backward.clear()
        for table in (self._roots, self._losses):
            for slot in list(table.values()):
                _remove(slot)
            table.clear()


def _remove(slot: _Slot) -> None:
    """The slot's hooks are no-ops at once (out of torch's dicts when safe); what it
    kept is dropped."""
    handles = [slot.handle, slot.out_handle]
    slot.handle = slot.out_handle = None
    slot.call = slot.loss = None
    slot.norms = None
    for handle in handles:
        if handle is None:
            continue
        try:
            handle.remove()
        except Exception:
            pass
