"""Which modules the input keeper hooks, and when (inputs.py keeps their calls).

At each plan check (the training thread, inside a step boundary) the roots of every
track's plan; at a cell's start and at ``watch()`` (the kernel's thread, no other cell
running) also *candidates*: the watched models and the namespace's models with trainable
parameters, the largest first (one whose parameters a larger one holds adds nothing), at
most ``MAX_CANDIDATES``, and only while no thread is inside a module's forward (a user's
training thread: torch iterates the hook dicts there without a lock). A candidate is
hooked before its first step, so a training cell's first step has its batch and its loss
kept; it stays hooked until the next scan. The namespace's loss modules are hooked
alongside. Roots of tracks that skip non-finite steps
(and candidates a ``watch(..., skip_nonfinite=True)`` or the skip action covers) copy
their normalisation running statistics at each step's first forward (norm_stats.py).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..watches import watches

if TYPE_CHECKING:
    from torch.nn import Module

    from .inputs import InputKeeper
    from .track import Track

#: Models hooked before their first step at most (the largest of the namespace).
MAX_CANDIDATES = 16


def forward_running() -> bool:
    """Some thread is inside a module's forward: torch iterates the hook dicts there
    without a lock, so a scan adds no hook now (thread_stacks.py, as the end-of-backward
    hooks do for backward)."""
    nn_module = sys.modules.get("torch.nn.modules.module")
    if nn_module is None:
        return False
    from ..thread_stacks import any_thread_inside

    return any_thread_inside("_call_impl", nn_module.__file__ or "")


def sync(
    keeper: InputKeeper,
    tracks: list[Track],
    candidates: list[tuple[str, weakref.ref[Module]]],
    ns: Mapping[str, object],
    skip_all: bool,
) -> dict[int, Module]:
    """Hook the tracks' roots, the candidates and the loss modules; returns the
    namespace's compiled wrappers (id of the wrapped module -> its wrapper)."""
    from .inputs import compile_wrappers, hook_target
    from .loss_sources import loss_modules

    wrappers = compile_wrappers(ns)
    roots: list[tuple[str, Module]] = []
    norms: list[Module] = []
    seen: set[int] = set()

    def add(name: str, module: Module | None, skip: bool) -> None:
        target = None if module is None else hook_target(module, wrappers)
        if target is None:
            return
        if id(target) not in seen:
            seen.add(id(target))
            roots.append((name, target))
        if skip:
            norms.append(target)

    for track in tracks:
        plan = track.plan
        for name, ref in [] if plan is None else plan.roots:
            add(name, ref(), track.skip_nonfinite)
    for name, ref in candidates:
        module = ref()
        if module is not None:
            add(name, module, skip_all or model_skips(module))
    keeper.sync(roots, loss_modules(ns), norms)
    return wrappers


def model_skips(module: Module) -> bool:
    """A ``watch(model, ..., skip_nonfinite=True)`` covers ``module``'s parameters."""
    active = [w for w in watches()[1] if w.skip_nonfinite]
    if not active:
        return False
    try:
        ids = {id(p) for p in module.parameters()}
    except Exception:
        return False
    for w in active:
        model = w.model
        try:
            if model is module or (
                model is not None and any(id(p) in ids for p in model.parameters())
            ):
                return True
        except Exception:
            continue
    return False


def candidate_models(ns: Mapping[str, object]) -> list[tuple[str, Module]]:
    """The watched models, then the namespace's models with trainable parameters (the
    largest first; one whose parameters a larger one holds adds nothing)."""
    nn = sys.modules.get("torch.nn")
    module_type = getattr(nn, "Module", None)
    if module_type is None:
        return []
    found: list[tuple[str, Module]] = []
    names = {id(v): k for k, v in list(ns.items()) if isinstance(k, str) and not k.startswith("_")}
    for w in watches()[1]:
        m = w.model
        if m is not None:
            found.append((names.get(id(m), type(m).__name__.lower()), m))
    found += [
        (k, v)
        for k, v in list(ns.items())
        if isinstance(k, str) and not k.startswith("_") and isinstance(v, module_type)
    ]
    sized: list[tuple[int, int, str, Module, set[int]]] = []
    seen: set[int] = set()
    for i, (name, m) in enumerate(found[: MAX_CANDIDATES * 8]):
        if id(m) in seen:
            continue
        seen.add(id(m))
        try:
            ids = {id(p) for p in m.parameters() if p.requires_grad}
        except Exception:
            continue
        if ids:
            sized.append((-len(ids) if i >= len(watches()[1]) else -(10**12), i, name, m, ids))
    sized.sort(key=lambda t: (t[0], t[1]))
    out: list[tuple[str, Module]] = []
    covered: set[int] = set()
    for _, _, name, m, ids in sized:
        if ids <= covered:
            continue
        covered |= ids
        out.append((name, m))
        if len(out) >= MAX_CANDIDATES:
            break
    return out
