"""Keep the tool's module hooks out of what the user saves, copies or scripts (R29).

A forward hook lives in the module's own ``_forward_pre_hooks`` / ``_forward_hooks``
dicts, so ``torch.save(model)`` / ``pickle`` / ``copy.deepcopy`` would try to pickle the
tool's closures ("Can't pickle local object") and ``torch.jit.script`` would try to
compile them ("try blocks aren't supported"). So while a module carries one of our hooks,
it also carries two instance attributes, both looked up on the instance before the class:

- ``__getstate__`` (what pickle and deepcopy ask for): the module's state as its class
  would give it, without our hooks and without these two attributes. A saved model loads
  anywhere, without this package.
- ``__prepare_scriptable__`` (what ``torch.jit.script`` calls on every module before it
  compiles anything): removes our hooks and attributes for good — the caller stops keeping
  that module's calls — and returns the module, which then scripts as without the tool.

A class that defines ``__prepare_scriptable__`` itself is left unhooked (``guardable``):
shadowing it would change what the user's own scripting does. Everything is removed
with the hook (unload, plan change; module_hooks.py calls ``protect`` / ``unprotect``
when it changes torch's dicts): the module ends exactly as it was.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.nn import Module

_STATE = "__getstate__"
_SCRIPT = "__prepare_scriptable__"
#: The hook-id keyed dicts of ``nn.Module`` that can hold our ids.
_HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)


def guardable(module: Module) -> bool:
    """False when the module's class scripts itself its own way (left unhooked)."""
    return not any(_SCRIPT in vars(c) for c in type(module).__mro__)


def protect(module: Module, hook_id: int, on_script: Callable[[Module], None]) -> None:
    """``hook_id`` (a ``RemovableHandle.id`` of ours) stays out of pickles and scripts;
    ``on_script(module)`` runs when ``torch.jit.script`` reaches the module."""
    ours: set[int] = module.__dict__.get("_torchdbg_hook_ids") or set()
    ours.add(hook_id)
    if "_torchdbg_hook_ids" in module.__dict__:
        return
    ref = weakref.ref(module)
    # object.__getstate__ exists from Python 3.11; before, the state is the __dict__.
    cls_getstate: Callable[[Module], object] | None = getattr(type(module), _STATE, None)

    def getstate() -> dict[str, object]:
        m = ref()
        if m is None:  # pragma: no cover - the module is being pickled, so alive
            return {}
        state = cls_getstate(m) if cls_getstate is not None else None
        state = dict(state if isinstance(state, dict) else m.__dict__)
        return _without(state, ours)

    def prepare_scriptable() -> Module | None:
        m = ref()
        if m is not None:
            on_script(m)  # removes the hooks (``unprotect`` runs from there)
            unprotect(m, None)
        return m

    module.__dict__["_torchdbg_hook_ids"] = ours
    module.__dict__[_STATE] = getstate
    module.__dict__[_SCRIPT] = prepare_scriptable


def unprotect(module: Module, hook_id: int | None) -> None:
    """Our hook ``hook_id`` is gone (None: all of them): drop the attributes with the last."""
    ours: set[int] | None = module.__dict__.get("_torchdbg_hook_ids")
    if ours is None:
        return
    if hook_id is not None:
        ours.discard(hook_id)
    if hook_id is None or not ours:
        for key in ("_torchdbg_hook_ids", _STATE, _SCRIPT):
            module.__dict__.pop(key, None)


def _without(state: dict[str, object], ours: set[int]) -> dict[str, object]:
    for key in ("_torchdbg_hook_ids", _STATE, _SCRIPT):
        state.pop(key, None)
    for key in _HOOK_DICTS:
        hooks = state.get(key)
        if isinstance(hooks, dict) and any(i in ours for i in hooks):
            state[key] = OrderedDict((i, h) for i, h in hooks.items() if i not in ours)
    return state
