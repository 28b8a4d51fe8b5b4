"""Re-running the user's code (the at-step probe, the Replay) changes nothing the user
computes (R53).

The probe (probe.py) and the Replay (replay_run.py) run the model's forward once more on a
kept batch. A forward may have side effects: it may count its calls, append to a list,
draw from ``random``, numpy or a ``torch.Generator``, reassign a buffer (``self.ema = ...``)
or change its input in place (``x.div_(2)``). So a re-run:

- runs on a copy of the batch (``copied``: every tensor cloned, containers rebuilt, walked
  ``MAX_DEPTH`` levels deep), never on the user's tensors;
- saves and puts back (``Saved``) every submodule's attributes, parameters, buffers and
  child modules *by object* (a rebinding such as ``self.calls += 1`` or ``self.ema = ...``
  is undone, an attribute the run added is removed);
- copies its buffers and tensor attributes (up to ``MAX_COPY_BYTES``; normalisation
  layers' always) and copies them back, changed or not: a kernel's own update
  (BatchNorm's running statistics) does not move a tensor's version counter. A
  parameter (never copied) or a tensor beyond the bound that was changed in place is
  seen by its version counter and named as not put back;
- saves and restores the Python ``random`` state, numpy's global one (only if numpy is
  imported), torch's CPU RNG and, only when CUDA is initialised, CUDA's (never
  initialising it, R02), and every ``torch.Generator``, numpy ``Generator`` /
  ``RandomState`` and ``random.Random`` found in the namespaces given and in the
  modules' attributes;
- in those namespaces (the notebook's, the modules where the user's ``forward`` is
  defined), puts back the names rebound and the lists, dicts and sets whose items
  changed (up to ``MAX_ITEMS`` items each).

What cannot be undone is any other effect of the user's code: files written, objects
outside those namespaces, counters in other modules. Hence the rule for running it
without a click (``user_code``): the automatic probe runs only when every submodule is
an instance of a class defined in ``torch.nn`` (no ``forward`` set on the instance) and
every forward hook on them is torch's or this tool's; otherwise the code that would run
is named, and only the Replay button, whose alert says so, runs it (or
``watch(model, rerun_forward=True)``, the user's word that its forward may be re-run).

Everything saved is dropped once it is put back: no reference to the user's tensors
outlives the re-run.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias, cast, overload

if TYPE_CHECKING:
    import torch
    from torch.nn import Module

    from .bad_step import KeptCall

#: Submodules looked at per root when deciding whether a forward is torch's own.
MAX_MODULES = 4096
#: A namespace container a re-run may change (saved by copy, put back in place).
_Container: TypeAlias = "list[object] | dict[object, object] | set[object]"
#: Container levels of a kept call rebuilt with cloned tensors.
MAX_DEPTH = 4
#: Items of one container copied (a kept call's, or a namespace's list / dict / set).
MAX_ITEMS = 100_000
#: Bytes of buffers and tensor attributes copied before a re-run (all modules).
MAX_COPY_BYTES = 512 * 2**20

_OWN = ("jupyterlab_torchdbg.", "torch.")


def user_code(modules: Iterable[Module]) -> str | None:
    """The first code of the user's that a forward of ``modules`` runs ("Net.forward", "a
    forward hook on model.1 (count)"); None when every submodule is a ``torch.nn`` class
    with torch's own forward and only torch's or this tool's hooks."""
    from torch.nn.modules import module as nn_module

    for hooks in (nn_module._global_forward_pre_hooks, nn_module._global_forward_hooks):
        for h in list(hooks.values()):
            if not _ours(h):
                return f"a global forward hook ({_name(h)})"
    for root in modules:
        for i, (name, m) in enumerate(root.named_modules()):
            if i >= MAX_MODULES:
                return f"{type(root).__qualname__} (over {MAX_MODULES} modules, not all looked at)"
            cls = type(m)
            if not str(getattr(cls, "__module__", "")).startswith("torch.nn."):
                return f"{cls.__qualname__}.forward"
            if "forward" in vars(m):
                return f"the forward set on {name or 'the model'} ({cls.__qualname__})"
            for hooks in (m._forward_pre_hooks, m._forward_hooks):
                for h in list(hooks.values()):
                    if not _ours(h):
                        return f"a forward hook on {name or 'the model'} ({_name(h)})"
    return None


def allowed() -> frozenset[int]:
    """Ids of the models watched with ``rerun_forward=True`` (and of their eager
    modules): the user's word that their forward may be re-run without a click."""
    from ..watches import watches

    out: set[int] = set()
    for w in watches()[1]:
        model = w.model
        if w.rerun_forward and model is not None:
            out.add(id(model))
            inner = getattr(model, "_orig_mod", None)  # a torch.compile wrapper's module
            if inner is not None:
                out.add(id(inner))
    return frozenset(out)


def _ours(hook: object) -> bool:
    return str(getattr(hook, "__module__", "") or "").startswith(_OWN)


def _name(f: object) -> str:
    return str(getattr(f, "__qualname__", None) or type(f).__qualname__)


def user_globals(modules: Iterable[Module]) -> list[dict[str, object]]:
    """The global namespaces of the user's ``forward`` functions under ``modules``."""
    out: dict[int, dict[str, object]] = {}
    for root in modules:
        for i, m in enumerate(root.modules()):
            if i >= MAX_MODULES:
                break
            g = getattr(getattr(type(m).forward, "__func__", type(m).forward), "__globals__", None)
            if isinstance(g, dict) and not str(g.get("__name__", "")).startswith(_OWN):
                out[id(g)] = g
    return list(out.values())


@overload
def copied(value: tuple[object, ...], depth: int = 0) -> tuple[object, ...]: ...
@overload
def copied(value: dict[str, object], depth: int = 0) -> dict[str, object]: ...
@overload
def copied(value: object, depth: int = 0) -> object: ...
def copied(value: object, depth: int = 0) -> object:
    """``value`` with every tensor cloned (detached) and tuples, lists and dicts rebuilt,
    ``MAX_DEPTH`` levels deep; anything else as it is."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if depth >= MAX_DEPTH:
        return value
    if (
        isinstance(value, (tuple, list))
        and type(value) in (tuple, list)
        and len(value) <= MAX_ITEMS
    ):
        out = [copied(v, depth + 1) for v in value]
        return tuple(out) if type(value) is tuple else out
    if type(value) is dict and len(value) <= MAX_ITEMS:
        return {k: copied(v, depth + 1) for k, v in value.items()}
    return value


def copied_call(call: KeptCall) -> KeptCall:
    """A kept call on a copy of its batch."""
    from .bad_step import KeptCall

    return KeptCall(copied(call.args), copied(call.kwargs), call.call)


class Saved:
    """What a re-run of ``modules``' forward may change, saved; ``restore`` puts it back
    and returns what it could not (names)."""

    def __init__(self, modules: Iterable[Module], spaces: Iterable[dict[str, object]]) -> None:
        import torch
        from torch.nn.modules.batchnorm import _NormBase

        self._dicts: list[tuple[dict[str, object], dict[str, object]]] = []
        # name, tensor, copy, version
        self._values: list[tuple[str, torch.Tensor, torch.Tensor | None, int]] = []
        self._containers: list[tuple[_Container, _Container]] = []  # container, its copy
        self._rngs: list[tuple[object, object]] = []  # owner, its state
        self.rng_names: list[str] = []
        #: What was changed and could not be put back (set by ``restored``).
        self.left: list[str] = []
        budget = MAX_COPY_BYTES
        seen: set[int] = set()
        found: list[object] = []
        for root in modules:
            for prefix, m in root.named_modules(remove_duplicate=True):
                if id(m) in seen:
                    continue
                seen.add(id(m))
                for d in (m.__dict__, m._parameters, m._buffers, m._modules):
                    self._dicts.append((d, dict(d)))
                params = set(map(id, m._parameters.values()))
                # running statistics change inside the kernel, unseen by the version
                # counter: always copied (a channel-sized vector each)
                norm = isinstance(m, _NormBase)
                tensors = [(k, v) for k, v in m._buffers.items() if v is not None]
                tensors += [(k, v) for k, v in m._parameters.items() if v is not None]
                tensors += [(k, v) for k, v in vars(m).items() if isinstance(v, torch.Tensor)]
                for k, t in tensors:
                    size = t.numel() * t.element_size()
                    copy = None
                    if id(t) not in params and (size <= budget or norm):
                        budget -= size
                        with torch.no_grad():
                            copy = t.detach().clone()
                    self._values.append((f"{prefix}.{k}" if prefix else k, t, copy, _version(t)))
                found += [v for v in vars(m).values() if _is_rng(v)]
        for ns in spaces:
            if id(ns) in seen:
                continue  # the notebook's namespace is also its classes' globals
            seen.add(id(ns))
            self._dicts.append((ns, dict(ns)))
            for v in list(ns.values()):
                if isinstance(v, (list, dict, set)) and type(v) in (list, dict, set):
                    if len(v) <= MAX_ITEMS:
                        self._containers.append((v, v.copy()))
                if _is_rng(v):
                    found.append(v)
                elif isinstance(v, (list, tuple, dict)) and type(v) in (list, tuple, dict):
                    if len(v) <= 64:
                        found += [x for x in (v.values() if type(v) is dict else v) if _is_rng(x)]
        self._save_rngs(found)

    def _save_rngs(self, found: list[object]) -> None:
        import torch

        self._rngs.append((random, random.getstate()))
        self.rng_names.append("Python")
        np = sys.modules.get("numpy")
        if np is not None:
            self._rngs.append((np.random, np.random.get_state()))
            self.rng_names.append("numpy")
        self._rngs.append((torch, torch.get_rng_state()))
        self.rng_names.append("torch")
        if torch.cuda.is_initialized():
            self._rngs.append((torch.cuda, torch.cuda.get_rng_state_all()))
            self.rng_names.append("torch.cuda")
        ids = set()
        for g in found:
            if id(g) not in ids:
                ids.add(id(g))
                self._rngs.append((g, _rng_state(g)))
        if ids:
            self.rng_names.append(f"{len(ids)} generator{'s' * (len(ids) > 1)} of yours")

    def restore(self) -> list[str]:
        """Put everything back (each part on its own: one failing does not stop the
        others); names of what was changed and not put back."""
        import torch

        left: list[str] = []
        dicts, self._dicts = self._dicts, []
        for target, saved in dicts:
            try:
                for k in [k for k in target if k not in saved]:
                    del target[k]
                for k, v in saved.items():
                    if k not in target or target[k] is not v:
                        target[k] = v
            except Exception:
                left.append("attributes")
        values, self._values = self._values, []
        with torch.no_grad():
            for name, t, copy, version in values:
                try:
                    if copy is not None:
                        t.copy_(copy)  # always: a kernel's own update (BatchNorm's
                        # running statistics) does not move the version counter
                    elif version < 0 or _version(t) != version:
                        left.append(name)
                except Exception:
                    left.append(name)
        containers, self._containers = self._containers, []
        for c, kept in containers:
            try:
                if not _changed(c, kept):
                    continue
                c.clear()
                if isinstance(c, list):
                    c.extend(kept)
                elif isinstance(c, dict):
                    c.update(cast("dict[object, object]", kept))  # its own copy: a dict
                else:
                    c.update(kept)
            except Exception:
                left.append(f"a {type(c).__name__}")
        rngs, self._rngs = self._rngs, []
        for owner, state in rngs:
            try:
                _set_rng(owner, state)
            except Exception:
                left.append("a random number generator")
        return left


@contextmanager
def restored(
    modules: Iterable[Module], spaces: Iterable[dict[str, object]] = ()
) -> Iterator[Saved]:
    """Save what a re-run may change, run the block, put it back (``Saved.left``: what
    was not put back)."""
    saved = Saved(list(modules), list(spaces))
    try:
        yield saved
    finally:
        saved.left = saved.restore()


def _version(t: torch.Tensor) -> int:
    try:
        return int(t._version)
    except Exception:
        return -1  # an inference tensor: no version counter, so compared by its copy


def _changed(c: _Container, saved: _Container) -> bool:
    if len(c) != len(saved):
        return True
    if isinstance(c, list):
        return any(a is not b for a, b in zip(c, saved, strict=True))
    if isinstance(c, dict) and isinstance(saved, dict):
        return any(k not in saved or saved[k] is not v for k, v in c.items())
    return bool(c != saved)


def _is_rng(v: object) -> bool:
    import torch

    if isinstance(v, (torch.Generator, random.Random)):
        return True
    np = sys.modules.get("numpy")
    return np is not None and isinstance(v, (np.random.Generator, np.random.RandomState))


# Any: numpy's generators (the module, a RandomState, a Generator): numpy is optional, untyped here
def _rng_state(g: Any) -> object:
    import torch

    if isinstance(g, torch.Generator):
        return g.get_state()
    if isinstance(g, random.Random):
        return g.getstate()
    if isinstance(g, ModuleType) or not hasattr(g, "bit_generator"):
        return g.get_state()
    return g.bit_generator.state


# Any: an owner of _rngs (numpy's generators untyped) and the state it gave, put back as is
def _set_rng(owner: Any, state: Any) -> None:
    import torch

    if owner is random:
        random.setstate(state)
    elif owner is torch:
        torch.set_rng_state(state)
    elif owner is torch.cuda:
        torch.cuda.set_rng_state_all(state)
    elif isinstance(owner, torch.Generator):
        owner.set_state(state)
    elif isinstance(owner, random.Random):
        owner.setstate(state)
    elif isinstance(owner, ModuleType) or not hasattr(owner, "bit_generator"):
        owner.set_state(state)  # numpy.random (the module: global state) or a RandomState
    else:
        owner.bit_generator.state = state  # a numpy Generator
