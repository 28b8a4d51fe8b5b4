"""The tool's hooks on the user's modules, switched only when no forward can see the switch.

Every forward pre-hook and forward hook the tool puts on a user's module (the input
keeper's, grads/inputs.py; the forward probe's, grads/probe.py) is registered and
removed here, under the rule the optimizer step hooks follow (kernel/step_boundary.py, R41):

- **A trampoline that never raises and never mismatches.** torch calls
  ``hook(module, args, kwargs)`` when a pre-hook's id is in ``_forward_pre_hooks_with_kwargs``
  and ``hook(module, args)`` otherwise, deciding per call from a snapshot of the hook
  dict. A registration or removal on another thread between the snapshot and that test
  used to call a ``with_kwargs`` hook without its ``kwargs`` (``TypeError`` in the
  user's forward). What torch stores is a ``ModuleHook``: it takes either arity, runs
  the feature's function only when called with the arity it was registered for, and
  catches everything (R11). Once removed (or its owner closed) it does nothing and holds
  nothing: the function, and the batch its closure keeps, are dropped at once (R24).
- **torch's dicts change only when no thread is inside a module call.** Adding or
  removing changes ``_forward_pre_hooks`` / ``_forward_hooks`` and their ``with_kwargs``
  companions, which ``Module._call_impl`` reads without a lock (and, on a forward that
  raises, iterates lazily). So the change is made in one stretch without a thread switch
  (switch interval raised, garbage collector off) in which no thread's stack is inside
  ``_call_impl`` (thread_stacks.py). Otherwise it waits: a maintainer thread (touching no
  tensor, R36) retries every ``RETRY_S`` until such a moment. ``wait_idle`` waits for it.
- **An owner that closes.** Each feature's hooks belong to a ``HookSet``. ``close()``
  (unload) makes every hook of the set a no-op, removes it (now or when safe) and
  refuses any later add: a training thread still inside the old extension's step (it
  read the step hooks' target before the unload) cannot put a hook back afterwards.
  Removal is idempotent.
- **Out of pickles and scripts** (hook_guard.py, R29): an installed hook's id is
  protected; ``torch.jit.script`` reaching the module removes every hook of ours on it at
  once (the user's own thread asked for it) and tells the owner.

After an unload, once no thread is in a module call, no hook of ours is left in any
module's dicts, and no closure of ours holds a tensor.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from . import hook_guard
from .thread_stacks import any_thread_inside

if TYPE_CHECKING:
    from torch.nn import Module
    from torch.utils.hooks import RemovableHandle

#: How often a waiting install / removal looks again for a moment without a module call.
RETRY_S = 0.01
PRE, POST = "pre", "post"

HookFn = Callable[..., None]
#: ``(module, PRE or POST, fn, with_kwargs[, always_call])``: one hook ``HookSet.add`` makes.
HookSpec = tuple["Module", str, HookFn, bool] | tuple["Module", str, HookFn, bool, bool]


class ModuleHook:
    """One hook of ours on one module: what torch's hook dict holds."""

    __slots__ = ("__weakref__", "_fn", "always", "handle", "kind", "owner", "ref", "with_kwargs")

    def __init__(
        self, owner: HookSet, module: Module, kind: str, fn: HookFn, kw: bool, always: bool = False
    ):
        self.owner = owner
        self.ref = weakref.ref(module)
        self.kind = kind
        self.with_kwargs = kw
        #: A forward hook torch calls even when the forward raises (``always_call``).
        self.always = always
        self._fn: HookFn | None = fn
        self.handle: RemovableHandle | None = None

    @property
    def live(self) -> bool:
        return self._fn is not None

    @property
    def id(self) -> int | None:
        """torch's id of the registered hook (None: not in torch's dicts)."""
        return None if self.handle is None else self.handle.id

    def __call__(self, module: Module, args: tuple[object, ...], *rest: object) -> None:
        """torch's call: ``rest`` is ``(kwargs,)``, ``(output,)``, ``(kwargs, output)``
        or nothing. Another arity than registered (a switch in flight) or a removed hook:
        nothing happens. Never raises; returns None (inputs and outputs stay as they are)."""
        fn = self._fn
        if fn is None or len(rest) != (self.kind == POST) + self.with_kwargs:
            return
        try:
            fn(module, args, *rest)
        except Exception:
            self.owner.failed()

    def remove(self, now: bool = False) -> None:
        """A no-op from now on; out of torch's dicts now or once safe (``now``: at once,
        for ``torch.jit.script``). Idempotent."""
        MODULE_HOOKS.remove([self], now)


class HookSet:
    """One feature's hooks; ``close`` removes them all and refuses new ones."""

    def __init__(
        self, on_error: Callable[[str], None], site: str, on_script: Callable[[Module], None] | None
    ) -> None:
        self._on_error = on_error
        self._site = site
        #: ``torch.jit.script`` reached a module of ours (hook_guard.py): told after the
        #: hooks on it are gone.
        self.on_script = on_script
        self.hooks: set[ModuleHook] = set()
        self.closed = False

    def add(self, specs: Iterable[HookSpec], now: bool = False) -> list[ModuleHook]:
        """One hook per ``(module, PRE or POST, fn, with_kwargs[, always_call])``, in one
        stretch; [] once closed. ``now``: into torch's dicts at once (the at-step probe on
        the training thread's own models, which no thread is calling at its step)."""
        hooks = [ModuleHook(self, *spec) for spec in specs]
        return MODULE_HOOKS.install(self, hooks, now)

    def close(self) -> None:
        """Unload: every hook a no-op at once, removed when safe; no add from now on."""
        MODULE_HOOKS.close(self)

    def failed(self) -> None:
        try:
            self._on_error(self._site)
        except Exception:
            pass


class ModuleHooks:
    """The process's pending changes to torch's module hook dicts, and their maintainer."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        #: Hooks in torch's dicts (a removed one stays until it is safe to take out).
        self._installed: set[ModuleHook] = set()
        self._to_install: list[ModuleHook] = []
        self._to_remove: list[ModuleHook] = []
        self._maintainer: threading.Thread | None = None

    @property
    def pending(self) -> int:
        return len(self._to_install) + len(self._to_remove)

    def installed(self) -> list[ModuleHook]:
        return list(self._installed)

    # --- the owners' requests (any thread) -----------------------------------------------

    def install(self, owner: HookSet, hooks: list[ModuleHook], now: bool) -> list[ModuleHook]:
        with self._lock:
            if owner.closed:
                return []
            owner.hooks.update(hooks)
            if now or not self._switch(hooks, []):
                if now:
                    self._apply(hooks, [])
                else:
                    self._to_install.extend(hooks)
                    self._wake()
            return hooks

    def remove(self, hooks: list[ModuleHook], now: bool = False) -> None:
        with self._lock:
            out: list[ModuleHook] = []
            for h in hooks:
                h._fn = None
                h.owner.hooks.discard(h)
                if h in self._to_install:
                    self._to_install.remove(h)  # never reached torch
                elif h in self._to_remove:
                    if now:
                        self._to_remove.remove(h)
                        out.append(h)
                elif h.handle is not None:
                    out.append(h)
            if not out:
                return
            if now:
                self._apply([], out)
            elif not self._switch([], out):
                self._to_remove.extend(out)
                self._wake()

    def close(self, owner: HookSet) -> None:
        with self._lock:
            owner.closed = True
            self.remove(list(owner.hooks))

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is pending (tests, unload checks); True when done."""
        thread = self._maintainer
        if thread is not None:
            thread.join(timeout)
        return self.pending == 0

    def forked(self) -> None:
        """In a forked child: the lock may have been held, the maintainer is gone."""
        self._lock = threading.RLock()
        self._maintainer = None
        if self._to_install or self._to_remove:
            self._wake()

    # --- changing torch's dicts ----------------------------------------------------------

    def _switch(self, add: list[ModuleHook], drop: list[ModuleHook]) -> bool:
        """Change torch's dicts now if no thread is inside a module call; True if done.
        The check and the change run without a thread switch and without a collection
        (whose finalizers could let another thread in)."""
        nn_module = sys.modules.get("torch.nn.modules.module")
        filename = getattr(nn_module, "__file__", None) or ""
        old = sys.getswitchinterval()
        enabled = gc.isenabled()
        sys.setswitchinterval(1.0)
        gc.disable()
        try:
            if filename and any_thread_inside("_call_impl", filename):
                return False
            self._apply(add, drop)
            return True
        finally:
            if enabled:
                gc.enable()
            sys.setswitchinterval(old)

    def _apply(self, add: list[ModuleHook], drop: list[ModuleHook]) -> None:
        for h in drop:
            handle, h.handle = h.handle, None
            self._installed.discard(h)
            if handle is None:
                continue
            try:
                handle.remove()
                module = h.ref()
                if module is not None:
                    hook_guard.unprotect(module, handle.id)
            except Exception:
                h.owner.failed()
        for h in add:
            module = h.ref()
            if module is None or not h.live or h.handle is not None:
                continue
            try:
                if h.kind == PRE:
                    h.handle = module.register_forward_pre_hook(h, with_kwargs=h.with_kwargs)
                else:
                    more = {"always_call": True} if h.always else {}
                    h.handle = module.register_forward_hook(h, with_kwargs=h.with_kwargs, **more)
                self._installed.add(h)
                if hook_guard.guardable(module):
                    hook_guard.protect(module, h.handle.id, self._scripted)
            except Exception:
                h._fn = None
                h.owner.failed()

    def _scripted(self, module: Module) -> None:
        """``torch.jit.script`` reached ``module``: every hook of ours on it goes now,
        then each owner is told (it stops hooking that module)."""
        with self._lock:
            mine = [h for h in self._installed | set(self._to_install) if h.ref() is module]
            owners = {id(h.owner): h.owner for h in mine}
            self.remove(mine, now=True)
        for owner in owners.values():
            if owner.on_script is not None:
                try:
                    owner.on_script(module)
                except Exception:
                    owner.failed()

    def _wake(self) -> None:
        thread = self._maintainer
        if thread is None or not thread.is_alive():
            thread = threading.Thread(target=self._maintain, name="torchdbg-module-hooks")
            thread.daemon = True
            self._maintainer = thread
            thread.start()

    def _maintain(self) -> None:
        """Retry the pending changes until a moment without a module call."""
        stop = threading.Event()
        while True:
            with self._lock:
                add = [h for h in self._to_install if h.live]
                drop = list(self._to_remove)
                if not add and not drop:
                    self._to_install = []
                    self._maintainer = None
                    return
                if self._switch(add, drop):
                    self._to_install, self._to_remove = [], []
                    self._maintainer = None
                    return
            stop.wait(RETRY_S)


#: The process's module hooks (one per process, whichever extension instance is loaded).
MODULE_HOOKS = ModuleHooks()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=MODULE_HOOKS.forked)
