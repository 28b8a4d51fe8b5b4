"""One forward of one model, measured: the bytes each module saves for backward.

``SavedBytes(roots, done)`` puts, through module_hooks.py (R41), a forward pre-hook and a
forward hook (``always_call``: it runs even when the forward raises) on each root, and a
pre-hook and a hook on each of their submodules. The hooks do nothing until a root's
forward starts with grad enabled on some thread; that forward is the measured one:

- its pre-hook pushes a ``torch.autograd.graph.saved_tensors_hooks`` pair on that thread
  (only when no other pair is active: the user's ``save_on_cpu`` or checkpointing would
  be overridden inside the forward, so such a forward is not measured, ``failed``);
- each submodule's pre-hook / hook pushes / pops its name on a stack, so a saved tensor is
  attributed to the innermost module running when autograd saved it;
- the pack hook reads the tensor's storage address and size (never its data), skips the
  storages of the root's parameters and buffers and any storage already counted, and
  returns ``tensor.detach()`` (same storage, no copy: returning the tensor itself would
  make the reference cycle torch's documentation warns about, keeping an output alive
  until the garbage collector runs); the unpack hook returns what it is given;
- the root's forward hook pops the pair, every hook of the set is closed (a no-op at once,
  out of torch's dicts as soon as no thread is in a module call), and ``done`` gets a
  ``Saved`` of plain ints and strings: no tensor outlives the measurement.

Other threads' forwards are not looked at; a nested call of the root counts in the outer
one. The batch is the first dimension of the root's first tensor argument (positional
first, then keyword arguments in order).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

from ...module_hooks import POST, PRE, HookSet, HookSpec, ModuleHook

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module

#: Submodules hooked per root (a deeper model's rest is attributed to their parents).
MAX_MODULES = 4096


@dataclass
class Saved:
    """What one measured forward saved for backward (ints and strings only)."""

    root: str
    batch: int | None
    device: str | None
    total: int = 0
    #: module name -> [bytes, storages]
    modules: dict[str, list[int]] = field(default_factory=dict)
    #: Why the measurement failed (None: it did not).
    failed: str | None = None


def batch_of(
    args: tuple[object, ...], kwargs: Mapping[str, object]
) -> tuple[int | None, str | None]:
    """(first dimension, device) of the first tensor argument, positional then keyword."""
    import torch

    for v in (*args, *kwargs.values()):
        if isinstance(v, torch.Tensor):
            dev = str(v.device)
            return (int(v.shape[0]) if v.dim() > 0 else None), dev
    return None, None


def storage_key(t: Tensor) -> tuple[str, int, int] | None:
    """(device, address, bytes) of ``t``'s storage; None when it has none to count."""
    s = t.untyped_storage()
    ptr = int(s.data_ptr())
    if ptr == 0:
        return None
    return str(t.device), ptr, int(s.nbytes())


class SavedBytes:
    """The measurement of the next grad-enabled forward of one of ``roots``."""

    def __init__(
        self,
        roots: list[tuple[str, Module]],
        done: Callable[[Saved], None],
        on_error: Callable[[str], None],
    ) -> None:
        self._done = done
        self._lock = threading.Lock()
        self.hooks = HookSet(on_error, "memory:activations", self._scripted)
        self._thread: int | None = None
        self._depth = 0
        self._stack: list[str] = []
        self._skip: set[tuple[str, int]] = set()
        self._seen: set[tuple[str, int]] = set()
        self._pushed = False
        self._cancelled = False
        self.result: Saved | None = None
        self.finished = False
        specs: list[HookSpec] = []
        for name, root in roots:
            specs.append((root, PRE, self._root_pre(name, root), True))
            specs.append((root, POST, self._root_post, True, True))
            for i, (sub, m) in enumerate(root.named_modules()):
                if i > MAX_MODULES:
                    break
                if m is root:
                    continue
                specs.append((m, PRE, self._enter(f"{name}.{sub}"), False))
                specs.append((m, POST, self._leave, False))
        self.installed: list[ModuleHook] = self.hooks.add(specs)

    @property
    def ready(self) -> bool:
        """Every hook is in torch's dicts (an idle re-run may start)."""
        return bool(self.installed) and all(
            h.handle is not None or not h.live for h in self.installed
        )

    # --- the hooks (the training thread) ---------------------------------------------------

    def _root_pre(self, name: str, root: Module) -> Callable[..., None]:
        def pre(module: Module, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
            import torch

            me = threading.get_ident()
            if self._thread == me:
                self._depth += 1  # the root called inside its own forward
                return
            if self.finished or not torch.is_grad_enabled():
                return  # an evaluation forward saves nothing: wait for a training one
            with self._lock:
                if self._thread is not None or self.finished:
                    return
                self._thread = me
            self._depth = 1
            batch, device = batch_of(args, kwargs)
            self.result = res = Saved(name, batch, device)
            ag = torch._C._autograd
            enabled = getattr(ag, "_saved_tensors_hooks_is_enabled", lambda: True)
            if not enabled():
                self._fail("saved-tensor hooks are disabled here (a torch.compile region?)")
                return
            if _top_hooks(ag) is not None:
                self._fail(
                    "your forward runs under saved-tensor hooks (save_on_cpu or activation "
                    "checkpointing): measuring would replace them, so it was not measured"
                )
                return
            for t in (*root.parameters(), *root.buffers()):
                try:
                    k = storage_key(t)
                except Exception:
                    continue
                if k is not None:
                    self._skip.add(k[:2])
            ag._push_saved_tensors_default_hooks(self._pack, _unpack)
            self._pushed = True
            res.modules[name] = [0, 0]

        return pre

    def _root_post(
        self, module: Module, args: tuple[object, ...], kwargs: dict[str, object], output: object
    ) -> None:
        if self._thread != threading.get_ident() or self.finished:
            return
        self._depth -= 1
        if self._depth > 0:
            return
        raised = bool(self._stack) or output is None
        self._finish("the measured forward raised an error" if raised else None)

    def _enter(self, name: str) -> Callable[[Module, tuple[object, ...]], None]:
        def enter(module: Module, args: tuple[object, ...]) -> None:
            if self._pushed and self._thread == threading.get_ident():
                self._stack.append(name)

        return enter

    def _leave(self, module: Module, args: tuple[object, ...], output: object) -> None:
        if self._pushed and self._thread == threading.get_ident() and self._stack:
            self._stack.pop()

    def _pack(self, t: Tensor) -> Tensor:
        try:
            res = self.result
            if res is not None and self._thread == threading.get_ident():
                k = storage_key(t)
                if k is not None and k[:2] not in self._skip and k[:2] not in self._seen:
                    self._seen.add(k[:2])
                    res.total += k[2]
                    row = res.modules.setdefault(
                        self._stack[-1] if self._stack else res.root, [0, 0]
                    )
                    row[0] += k[2]
                    row[1] += 1
        except Exception:
            self.hooks.failed()
        return t.detach()

    # --- the end ---------------------------------------------------------------------------

    def _fail(self, why: str) -> None:
        self._finish(why)

    def _finish(self, failed: str | None) -> None:
        if self._pushed:
            self._pushed = False
            try:
                import torch

                torch._C._autograd._pop_saved_tensors_default_hooks()
            except Exception:
                self.hooks.failed()
        self.finished = True
        self._stack, self._skip, self._seen = [], set(), set()
        self.hooks.close()
        res = self.result
        if res is None:
            return
        if self._cancelled:
            failed = "cancelled"
        if failed is not None:
            res.failed = failed
        res.modules = {k: v for k, v in res.modules.items() if v[0] > 0}
        try:
            self._done(res)
        except Exception:
            self.hooks.failed()

    def cancel(self) -> None:
        """Unload, or a new measurement replacing this one: every hook goes (a forward
        measured right now on another thread ends at its root's hook, which pops the
        saved-tensor hooks it pushed on that thread)."""
        with self._lock:
            if self._thread is not None and not self.finished:
                self._cancelled = True
                return
            self.finished = True
        self.hooks.close()

    def _scripted(self, module: Module) -> None:
        self.cancel()  # torch.jit.script reached a hooked module: stop hooking it


def _top_hooks(ag: ModuleType) -> object:
    """The saved-tensor hooks active on this thread (None: none)."""
    try:
        return ag._top_saved_tensors_default_hooks(False)
    except TypeError:  # torch before 2.4 takes no argument
        return ag._top_saved_tensors_default_hooks()


def _unpack(x: Tensor) -> Tensor:
    return x
