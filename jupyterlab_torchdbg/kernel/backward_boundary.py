"""The end-of-backward boundary: models whose loop never calls ``optimizer.step()``.

The classic word-language-model example updates its weights by hand
(``p.data.add_(p.grad, alpha=-lr)`` after ``clip_grad_norm_``): no optimizer step hook
ever fires, so the step boundary (step_boundary.py, which owns this module) watches the
end of each backward pass instead, for the models in the notebook's namespace (or given
to ``watch()``) whose parameters no optimizer steps:

- a post-accumulate-grad hook (``Tensor.register_post_accumulate_grad_hook``) on the
  first trainable parameter of each module (a module's parameters take part in a
  backward together: a Linear's bias with its weight). The first one to fire in a
  backward pass (a new autograd graph task id) queues an engine callback
  (``Variable._execution_engine.queue_callback``) that runs once the whole backward has
  finished, on the thread that called ``backward()`` — how DDP finds the end of
  backward. A hook call is torch's trip into Python (microseconds, measured in
  tests/test_grads_manual_loop.py) and a compare: one per module, not per tensor.
- that callback queues the boundary once more, so it runs after every callback queued
  later in the pass (DDP's reducer finalizes its all-reduce in one: read before it, a
  rank would see its local gradients); the boundary: gradients -> control, in
  step_boundary.py's ORDER (``StepBoundary.at_backward_end``; a worker's
  ``Worker.at_backward_end``, ranks/worker/manual.py). Memory is not called there: its
  ``after_step`` counts its argument as an optimizer of the memory breakdown.

A step here: one backward pass that accumulated a gradient into the model's parameters
(``autograd.grad``: none; ``backward(retain_graph=True)`` twice: two; N accumulation
passes: N, each read sees the sum so far; reentrant checkpointing's nested passes: one
boundary each).

When hooks may be registered. torch swaps a tensor's C++ hook holder at its first
Python post-accumulate-grad hook; a backward on another thread may read it mid-swap.
Later registrations and removals change a Python dict torch copies under the GIL: safe
at any time. So registration happens at cell starts (no other cell running), at
``watch()`` and just before a running cell's backward starts (backward_start.py), only
where no thread is inside ``backward()`` (every stack checked without a thread switch).

Which models: every ``nn.Module`` in the namespace (the largest first; a submodule of
one already watched adds nothing, ``enc = model.encoder``), or only the watched models
once any ``watch()`` is active (not those watched with an optimizer); minus the
parameters of optimizers that have stepped or are bound in the namespace. If an
optimizer steps a hooked parameter anyway (one kept in a trainer object), the optimizer
boundary takes over at that step: those parameters' hooks are removed, and once none is
left the model's end-of-backward track ends. A model whose optimizer the training cell
makes is the common case: its first backward ends here, then the optimizer steps those
gradients; that pass is the optimizer's first step, not a run of its own
(``StepBoundary._hand_over``: one run, one track, one control target).

No strong reference to a model (R24): ``ModelSource`` holds it by weakref and a finalizer
removes its hooks when it dies. Unload removes and closes every hook (R01, R41, the rule of
kernel/module_hooks.py): a call from a backward in flight does nothing, a scan racing the
unload adds none. An empty C++ hook dict stays on each parameter that had one."""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any

from .thread_stacks import any_thread_inside

if TYPE_CHECKING:
    import torch
    from torch.optim import Optimizer
    from torch.utils.hooks import RemovableHandle

#: ``GradTrack.boundary``: where a track's steps are read.
OPTIMIZER_STEP = "optimizer_step"
END_OF_BACKWARD = "end_of_backward"
#: Models looked at per scan at most (the largest namespaces stay cheap).
MAX_MODELS = 256
#: (name or None, model) of each active watch without an optimizer; None: no watch.
Watched = list[tuple[str | None, "torch.nn.Module"]] | None
Wanted = tuple[str, "torch.nn.Module", list["torch.Tensor"]]  # (name, model, params to hook)
_Sig = tuple[tuple[int, int], ...]  # (id, length) of an optimizer's param lists


class ModelSource:
    """One model updated by hand, where the monitor and control expect an optimizer.

    The key of its gradient track. ``param_groups`` has an optimizer's shape (one group,
    no ``lr``), so naming's plan, the monitor and clipping read it as they read an
    optimizer; a new list means new parameters (naming.group_sig sees it).
    """

    boundary = END_OF_BACKWARD

    def __init__(self, model: torch.nn.Module, name: str, params: list[torch.Tensor]) -> None:
        self.model_ref = weakref.ref(model)
        self.name = name
        self.param_groups: list[dict[str, Any]] = [{"params": params}]  # Any: as an optimizer's
        #: The clip this loop calls on the model's gradients, once seen (user_clip.py):
        #: a ``clip_grad_norm_`` loop is read at its clip, after it (grads/monitor.py).
        self.user_clip: tuple[str, float] | None = None
        self.hinted = False  # its loop's code was looked at for a clip (user_clip.py)

    @property
    def model(self) -> torch.nn.Module | None:
        return self.model_ref()

    @property
    def params(self) -> list[torch.Tensor]:
        params: list[torch.Tensor] = self.param_groups[0]["params"]
        return params

    def __repr__(self) -> str:
        return f"<end of backward of {self.name} ({len(self.params)} parameters)>"


def boundary_of(key: object) -> str:
    """The boundary a track keyed by ``key`` (an optimizer or a ``ModelSource``) uses."""
    return END_OF_BACKWARD if isinstance(key, ModelSource) else OPTIMIZER_STEP


class _Hooked:
    """One model's hooks, its source, and the finalizer that removes them when it dies."""

    def __init__(
        self,
        source: ModelSource,
        fire: Callable[[ModelSource], None],
        on_error: Callable[[str], None],
    ) -> None:
        self.source = source
        self.fire = fire
        self.on_error = on_error
        self.handles: dict[int, RemovableHandle] = {}  # id(param) -> its hook's handle
        self.task = -2  # the autograd graph task whose end is queued (or was last)
        self.finalizer: weakref.finalize[[int, _Hooked], torch.nn.Module] | None = None
        self.closed = False  # unloaded: a call from a backward in flight does nothing

    def on_grad(self, param: torch.Tensor) -> None:
        """A gradient was accumulated (inside backward, maybe on a device thread): queue
        the boundary once per backward pass. Kept to a compare; never raises."""
        try:
            task = _torch.task_id()
            if task != self.task and not self.closed:
                self.task = task
                _torch.queue(self.at_end)
        except Exception:  # never into the user's backward (R11): this read is skipped
            self.on_error("backward:hook")

    def at_end(self) -> None:
        """Queued by the first gradient of a pass: queues the boundary behind the
        callbacks queued later in the pass (DDP's ``finalize_backward``, which writes
        the all-reduced gradients), or runs it now if it cannot."""
        try:
            _torch.queue(self.at_end_final)
        except Exception:
            self.at_end_final()

    def at_end_final(self) -> None:
        """The whole backward has finished, and every other end-of-backward callback of it has run.
        Only the user's KeyboardInterrupt (while paused here) goes on into ``backward()``."""
        try:
            if not self.closed:
                self.fire(self.source)
        except Exception:
            self.on_error("backward:boundary")

    def remove(self, ids: Iterable[int] | None = None) -> None:
        """Remove the hooks of ``ids`` (all when None); safe on any thread, any time."""
        for pid in list(self.handles) if ids is None else list(ids):
            handle = self.handles.pop(pid, None)
            if handle is not None:
                handle.remove()
        if not self.handles and self.finalizer is not None:
            self.finalizer.detach()


class _Torch:
    """torch's engine entry points, bound once torch is imported (never at import)."""

    def __init__(self) -> None:
        self.task_id: Callable[[], int] = lambda: -1
        self.queue: Callable[[Callable[[], None]], None] = lambda fn: None
        self.graph_file = ""
        self.bound = False

    def bind(self) -> bool:
        if self.bound:
            return True
        import torch
        from torch.autograd import graph

        task_id = getattr(torch._C, "_current_graph_task_id", None)
        engine = getattr(torch.autograd.Variable, "_execution_engine", None)
        queue = getattr(engine, "queue_callback", None)
        if task_id is None or queue is None:
            return False  # an older torch: no end-of-backward boundary
        self.task_id, self.queue, self.graph_file = task_id, queue, graph.__file__
        self.bound = True
        return True


_torch = _Torch()


class BackwardHooks:
    """The end-of-backward hooks of every model no optimizer steps (step_boundary.py)."""

    def __init__(
        self, fire: Callable[[ModelSource], None], on_error: Callable[[str], None]
    ) -> None:
        self._fire = fire
        self._on_error = on_error
        self._lock = threading.Lock()
        self._hooked: dict[int, _Hooked] = {}  # id(model) -> its hooks
        #: Optimizers seen stepping, with the parameter lists they had then.
        self._stepped: weakref.WeakKeyDictionary[Optimizer, _Sig] = weakref.WeakKeyDictionary()
        self.attached = False

    def attach(self) -> None:
        """torch is imported: scans may hook models from now on."""
        self.attached = _torch.bind()

    def detach(self) -> None:
        """Remove every hook (unload): no parameter keeps one of ours."""
        self.attached = False
        with self._lock:
            hooked, self._hooked = self._hooked, {}
            self._stepped = weakref.WeakKeyDictionary()
        for h in hooked.values():
            h.closed = True
            h.remove()

    def sources(self) -> list[ModelSource]:
        return [h.source for h in list(self._hooked.values())]

    def hooked_params(self) -> int:
        return sum(len(h.handles) for h in list(self._hooked.values()))

    # --- the optimizer boundary takes over (training thread) ---------------------------

    def optimizer_seen(self, optimizer: torch.optim.Optimizer) -> list[ModelSource]:
        """Before an optimizer step: the parameters it steps leave the backward hooks.
        Returns the sources it took over whole (their hooks are gone): the step
        boundary hands their run, track and control target over to the optimizer."""
        sig = tuple((id(g["params"]), len(g["params"])) for g in optimizer.param_groups)
        try:
            if self._stepped.get(optimizer) == sig:
                return []
            self._stepped[optimizer] = sig
        except TypeError:
            pass  # an optimizer without weakref support: checked at every step
        if not self._hooked:
            return []
        ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
        taken: list[ModelSource] = []
        with self._lock:
            for key, h in list(self._hooked.items()):
                kept = [p for p in h.source.params if id(p) not in ids]
                if len(kept) == len(h.source.params):
                    continue
                h.remove(ids & h.handles.keys())
                if kept and h.handles:
                    h.source.param_groups = [{"params": kept}]
                else:
                    h.remove()
                    del self._hooked[key]
                    taken.append(h.source)
        return taken

    # --- scans (cell starts, watch(), a running cell's backward: backward_start.py) -----

    def scan(
        self, ns: Mapping[str, object], watched: Watched, starting: FrameType | None = None
    ) -> bool:
        """Hook new models, re-hook changed ones, unhook those gone out of scope (also a
        worker's, with the model it found at its first call: ranks/worker/manual.py).

        ``watched``: (name or None, model) of every active watch without an optimizer, or
        None when no watch is active (then the namespace is the scope). ``starting``: the
        engine frame of a backward about to start in a running cell (backward_start.py):
        hook only models no hook covers yet. False: a thread was inside backward.
        """
        if not self.attached:
            return True
        wanted = self._wanted(ns, watched)
        with self._lock:
            if not self.attached:  # an unload on another thread meanwhile: none added
                return True
            if starting is not None:
                have = {id(p) for h in self._hooked.values() for p in h.source.params}
                wanted = {k: w for k, w in wanted.items() if not have & {id(p) for p in w[2]}}
            for key in [k for k in self._hooked if k not in wanted and starting is None]:
                self._hooked.pop(key).remove()
            changes: list[Wanted] = []
            for key, (name, model, params) in wanted.items():
                h = self._hooked.get(key)
                if h is not None and h.source.model is model:
                    if [id(p) for p in h.source.params] == [id(p) for p in params]:
                        continue
                changes.append((name, model, params))
            if not changes:
                return True
            return self._hook_all(changes, starting)

    def _wanted(self, ns: Mapping[str, object], watched: Watched) -> dict[int, Wanted]:
        import torch

        names: dict[int, str] = {}
        for k, v in list(ns.items()):
            if isinstance(k, str) and not k.startswith("_"):
                names.setdefault(id(v), k)
        stepped: set[int] = set()
        for opt in [*list(self._stepped.keys()), *list(ns.values())]:
            if isinstance(opt, torch.optim.Optimizer):
                stepped.update(id(p) for g in opt.param_groups for p in g["params"])
        if watched is not None:
            found = [(n or names.get(id(m)) or type(m).__name__.lower(), m) for n, m in watched]
        else:
            found = [
                (k, v)
                for k, v in list(ns.items())
                if isinstance(k, str) and not k.startswith("_") and isinstance(v, torch.nn.Module)
            ]
        models: list[tuple[int, str, torch.nn.Module, list[torch.nn.Parameter]]] = []
        seen: set[int] = set()
        for name, model in found[:MAX_MODELS]:
            if id(model) in seen:
                continue
            seen.add(id(model))
            try:
                params = [p for p in model.parameters() if p.requires_grad and p.grad_fn is None]
            except Exception:  # R29: exotic modules may refuse
                continue
            if params:
                models.append((-len(params), name, model, params))
        models.sort(key=lambda t: t[0])  # the largest first (stable: namespace order)
        covered: set[int] = set(stepped)  # stepped by an optimizer, or by a larger model
        out: dict[int, Wanted] = {}
        for _, name, model, params in models:
            mine: list[torch.Tensor] = [p for p in params if id(p) not in covered]
            covered.update(id(p) for p in params)
            if mine:
                out[id(model)] = (name, model, mine)
        return out

    def _hook_all(self, changes: list[Wanted], starting: FrameType | None) -> bool:
        """Register in one stretch without a thread switch, if no thread is in backward."""
        old = sys.getswitchinterval()
        sys.setswitchinterval(1.0)
        try:
            if any_thread_inside("_engine_run_backward", _torch.graph_file, starting):
                return False
            for name, model, params in changes:
                key = id(model)
                h = self._hooked.get(key)
                if h is None or h.source.model is not model:
                    if h is not None:
                        h.remove()
                    h = _Hooked(ModelSource(model, name, params), self._fire, self._on_error)
                    h.finalizer = weakref.finalize(model, self._forget, key, h)
                    self._hooked[key] = h
                else:
                    h.source.name = name
                    h.source.param_groups = [{"params": params}]
                targets = _one_per_module(model, params)
                want = {id(p) for p in targets}
                h.remove([pid for pid in h.handles if pid not in want])
                if h.finalizer is not None and not h.finalizer.alive:
                    h.finalizer = weakref.finalize(model, self._forget, key, h)
                for p in targets:
                    if id(p) not in h.handles:
                        h.handles[id(p)] = p.register_post_accumulate_grad_hook(h.on_grad)
            return True
        finally:
            sys.setswitchinterval(old)

    def _forget(self, key: int, h: _Hooked) -> None:
        """The model died (its finalizer, any thread): remove its hooks, end its track."""
        try:
            h.remove()
            with self._lock:
                if self._hooked.get(key) is h:
                    del self._hooked[key]
        except Exception:
            self._on_error("backward:forget")


def _one_per_module(model: torch.nn.Module, params: list[torch.Tensor]) -> list[torch.Tensor]:
    """The first of ``params`` each module owns directly (in model order); parameters
    no module owns directly are all kept."""
    wanted = {id(p): p for p in params}
    out: dict[int, torch.Tensor] = {}
    owned: set[int] = set()
    try:
        for module in model.modules():
            mine = [p for p in module.parameters(recurse=False) if id(p) in wanted]
            owned.update(id(p) for p in mine)
            if mine and not any(id(p) in out for p in mine):
                out[id(mine[0])] = mine[0]
    except Exception:  # R29: exotic modules: hook every parameter instead
        return params
    for pid, p in wanted.items():
        if pid not in owned:
            out[pid] = p
    return list(out.values())
