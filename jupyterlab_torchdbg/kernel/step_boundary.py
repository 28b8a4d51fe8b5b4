"""The step boundary: the one owner of torch's hooks into the training step.

Zero code change: ``torch.optim.optimizer.register_optimizer_step_pre_hook`` and
``..._post_hook`` fire around every ``optimizer.step()`` of every optimizer. This module
is the only place that registers them (a test checks it); each feature is called from
here, in this order, written here and nowhere else:

0. **runs** (``Runs.at_step``) — which run this step belongs to: a step after idle, in another cell
   execution with a new optimizer, starts one (runs.py); the stream, the gradient monitor and
   control number their steps per run from there.
1. **gradients** (``GradMonitor.on_step``) — before the step: gradients are final (after
   DDP's all-reduce, after GradScaler's ``unscale_``). The monitor reads this step's
   per-tensor norms if the step is sampled (every step while clipping is on) and returns
   what it read as a ``StepRead``. It must come first: the recorded norm is the one
   *before* clipping, which is what a user debugging an explosion needs to see. A step
   taken with a closure runs 1 and 2 when the closure has returned (closure_step.py).
2. **control** (``Control.at_step``) — before the step, given that ``StepRead``: learning
   rate changes, clipping (reusing the norms just read: one read of the gradients serves
   both), then pause / single step (holding the training thread here).
3. **memory** (``MemoryMonitor.after_step``) — after the step: allocator counters and the
   breakdown see the optimizer state the step just created; actions waiting for a safe
   point (save_checkpoint) run here, between two steps.

Each feature catches its own failures (R11): nothing raises into ``step()`` except the user's own
KeyboardInterrupt while paused. A worker process of a multi-process job (ranks/worker/boundary.py)
has its own boundary, which the same hooks call (``HOOKS.adopt``; in a forked child ``HOOKS.pin``,
which the parent's load can no longer replace).

The loop's own clip (user_clip.py) tells this boundary what it clipped (``user_clip``):
remedies never advise that clip, and a loop without torch.optim that clips by norm is
read there, after its clip (the end of backward counts the step, defers the read).

The end of backward, for loops without torch.optim (``p.data.add_(p.grad, alpha=-lr)``): models
whose parameters no optimizer steps are read when their backward pass ends (``at_backward_end``,
called by the hooks of backward_boundary.py, which this boundary owns): gradients
(``GradMonitor.on_backward``, the same read and alarms on a track named after the model) -> control
(clipping and pause work there, before the manual update; learning-rate scaling is refused: there
is no optimizer to scale). Memory is left to the next optimizer step or the cell's end. Models are
hooked at cell starts, ``watch()`` (``scan_models``) and before a running cell's backward
(backward_start.py); an optimizer stepping a hooked parameter takes it over (``before_step``).

Loading and unloading while another thread trains (R41, R01). torch iterates its global hook dicts
inside ``Optimizer.step``'s wrapper without a lock: adding or removing a hook while a thread is in
that loop raises ``OrderedDict mutated during iteration`` in the user's ``step()``. So the process
has one pair of hooks (``TorchHooks``), and a load or unload only switches which ``StepBoundary``
they call. torch's dicts are changed only when no thread is inside an optimizer step: checked on
every thread's stack (``sys._current_frames``) and changed in the same uninterrupted stretch (the
GIL is held throughout: no thread can enter a step between the check and the change). When a thread
is inside a step, the change waits (``MaintainerThread``, polling, touching no tensors, R36) until
none is: an unload then leaves torch exactly as it found it once no step is in flight; a load
starts monitoring at the next step after that. Every other hook of the tool on the user's modules
follows the same rule (module_hooks.py, backward_boundary.py).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from . import closure_step
from .backward_boundary import BackwardHooks, ModelSource, Watched
from .backward_start import STARTS, CellLook
from .runs import Runs
from .thread_stacks import any_thread_inside
from .user_clip import CLIPS
from .watches import watches

if TYPE_CHECKING:
    from torch import Tensor
    from torch.optim.optimizer import Args, Kwargs, Optimizer
    from torch.utils.hooks import RemovableHandle

    from .control import Control
    from .grads import GradMonitor
    from .memory import MemoryMonitor

#: The order the features are called in at each step (documentation and tests).
ORDER = ("runs", "grads", "control", "memory")
#: How often a waiting install / removal looks again for a moment without a step.
RETRY_S = 0.01


class Boundary(Protocol):
    """What torch's step hooks call: the kernel's ``StepBoundary``, or a worker
    process's boundary (ranks/worker/boundary.py)."""

    def before_step(
        self, optimizer: Optimizer, args: Args | None = None, kwargs: Kwargs | None = None
    ) -> tuple[Args, Kwargs] | None: ...

    def after_step(
        self, optimizer: Optimizer, args: Args | None = None, kwargs: Kwargs | None = None
    ) -> None: ...


class StepBoundary:
    """Calls gradients -> control before each optimizer step and memory after it."""

    def __init__(
        self,
        grads: GradMonitor,
        control: Control,
        memory: MemoryMonitor,
        on_error: Callable[[str], None],
        runs: Runs | None = None,
        name_of: Callable[[object], str] = lambda o: type(o).__name__,
    ) -> None:
        self.runs = runs
        self._name_of = name_of
        self.grads = grads
        self.control = control
        self.memory = memory
        self._on_error = on_error
        self._handles: list[RemovableHandle] = []
        #: The end-of-backward hooks of models no optimizer steps.
        self.backward = BackwardHooks(self.at_backward_end, on_error)
        #: Models the running cell made are hooked as their backward starts.
        self.look = CellLook(self.backward)

    @property
    def attached(self) -> bool:
        """torch's hooks call this boundary (or will, once no thread is inside a step)."""
        return HOOKS.target is self

    def attach(self) -> Callable[[], None]:
        """torch is imported: the process's step hooks call this boundary from now on;
        returns ``detach``."""
        self.grads.attach_torch()
        HOOKS.adopt(self)
        try:
            self.backward.attach()
        except Exception:
            self._on_error("step_boundary:backward")
        try:
            CLIPS.adopt(self.user_clip, self._on_error)
            STARTS.adopt(self.look.backward_starts, self._on_error)
        except Exception:
            self._on_error("step_boundary:user_clip")
        return self.detach

    def detach(self) -> None:
        """The hooks stop calling this boundary; torch's hook dicts are as they were
        before the first ``attach`` once no thread is inside a step."""
        try:
            HOOKS.release(self)
        except Exception:
            self._on_error("step_boundary:detach")
        try:
            self.backward.detach()
        except Exception:
            self._on_error("step_boundary:detach")
        try:
            CLIPS.release(self.user_clip)
            STARTS.release(self.look.backward_starts)
        except Exception:
            self._on_error("step_boundary:detach")
        self.grads.detach_torch()

    def forked(self) -> None:
        """In a forked child (a rank started by fork, ranks/kernel/worker_env.py): this is the
        parent's boundary, never called again; the end-of-backward hooks it set on models
        go (their lock may have been held by another thread at the fork)."""
        self.backward._lock = threading.Lock()
        self.backward.detach()

    def before_step(
        self, optimizer: Optimizer, args: Args | None = None, kwargs: Kwargs | None = None
    ) -> tuple[Args, Kwargs] | None:
        """torch's step pre-hook: gradients, then control (which may hold here). The
        parameters this optimizer steps leave the end-of-backward boundary first. A step
        with a closure returns its arguments with the closure wrapped: gradients and
        control then run once the closure has made the gradients (closure_step.py)."""
        self.look.on = False  # an optimizer steps: its boundary is the step
        try:
            taken = self.backward.optimizer_seen(optimizer)
        except Exception:
            taken = []
            self._on_error("step_boundary:backward")
        for source in taken:
            self._hand_over(source, optimizer)
        self._run(optimizer)
        try:
            wrapped = closure_step.wrap(
                optimizer, args, kwargs, lambda n: self._in_closure(optimizer, n), self._on_error
            )
            if wrapped is not None:
                self.grads.replayer.run_pending()  # between steps (R34), before the closure
                self.grads.guard.before_closure(optimizer)
                return wrapped
        except Exception:
            self._on_error("step_boundary:closure")
        read = self.grads.on_step(optimizer)
        self.control.at_step(optimizer, read)
        return None

    def _in_closure(self, optimizer: Optimizer, call: int) -> None:
        """The step's closure returned (its ``call``-th time in this step)."""
        if call == 1:
            self.control.at_step(optimizer, self.grads.on_step(optimizer, pending=False))
        else:
            self.grads.guard.closure_again(optimizer)

    def _run(self, optimizer: object) -> None:
        """Runs first: the step's run (maybe a new one) is known to the features after."""
        if self.runs is None:
            return
        try:
            self.runs.at_step(optimizer, lambda: self._name_of(optimizer))
        except Exception:
            self._on_error("runs")

    def _hand_over(self, source: ModelSource, optimizer: Optimizer) -> None:
        """``optimizer`` took over every parameter of ``source`` (a model made in one cell
        whose optimizer is made in the training cell: hooked at the cell start, its first
        backward pass ended at this boundary before the optimizer's first step). When
        that pass was the source's only boundary in the run, it is this optimizer's
        step 1: one run, the optimizer's track and control target, nothing of the
        source left (runs, then gradients, then control)."""
        if self.runs is None:
            return
        try:
            phantom = self.runs.hand_over(source, optimizer, lambda: self._name_of(optimizer))
        except Exception:
            self._on_error("runs")
            return
        if phantom:
            self.grads.hand_over(source)
            self.control.hand_over(source)

    def at_backward_end(self, source: ModelSource) -> None:
        """A backward pass of a model no optimizer steps has ended (an autograd engine
        callback on the thread that called ``backward()``): gradients, then control."""
        self._run(source)
        read = self.grads.on_backward(source)
        self.control.at_step(source, read)

    def user_clip(self, tensors: Sequence[Tensor], kind: str, bound: float, grads: bool) -> None:
        """The loop's own ``clip_grad_norm_`` / ``clip_grad_value_`` has just run on
        these parameters (or gradients; user_clip.py): gradients learn that this loop
        clips, and a loop without torch.optim is read now, after its clip."""
        self.grads.user_clip(tensors, kind, bound, grads)

    def scan_models(self, ns: dict[str, object]) -> None:
        """The kernel's thread, at a cell start or ``watch()``: the gradient monitor
        keeps the batches of the namespace's models from their first step on
        (grads/nonfinite.py); hook the models no optimizer steps (backward_boundary.py
        says when that is safe)."""
        if not self.attached:
            return
        self.grads.guard.scan_models(ns)
        _, active = watches()
        if self.backward.attached:  # (``is not None``: a compiled model has no len())
            models = [w.model for w in active if w.optimizer is None]
            watched: Watched = [(None, m) for m in models if m is not None]
            self.backward.scan(ns, watched if active else None)
            self.look.cell_started(watching=bool(active))

    def after_step(
        self, optimizer: Optimizer, args: Args | None = None, kwargs: Kwargs | None = None
    ) -> None:
        """torch's step post-hook: a skipped step's gradients back, then memory."""
        self.grads.after_step(optimizer)
        self.memory.after_step(optimizer)


class TorchHooks:
    """The process's one pair of torch step hooks and the boundary they call now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handles: list[RemovableHandle] = []
        #: The loaded extension's boundary (None: the hooks pass through).
        self.target: Boundary | None = None
        #: In a forked worker child: the worker boundary, which no load replaces.
        self._pinned: Boundary | None = None
        #: What the maintainer thread still has to do: install, remove, or nothing.
        self._pending: str | None = None
        self._maintainer: threading.Thread | None = None

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    @property
    def pending(self) -> str | None:
        return self._pending

    # --- torch's hooks (training threads) ----------------------------------------------

    def before_step(
        self, optimizer: Optimizer, args: Args | None = None, kwargs: Kwargs | None = None
    ) -> tuple[Args, Kwargs] | None:
        target = self.target
        return None if target is None else target.before_step(optimizer, args, kwargs)

    def after_step(
        self, optimizer: Optimizer, args: Args | None = None, kwargs: Kwargs | None = None
    ) -> None:
        target = self.target
        if target is not None:
            target.after_step(optimizer)

    # --- load / unload (any thread) ------------------------------------------------------

    def adopt(self, boundary: Boundary) -> None:
        with self._lock:
            if self._pinned is not None and boundary is not self._pinned:
                return  # a forked worker: the inherited extension's load is ignored
            self.target = boundary
            if self._handles:
                self._pending = None  # a waiting removal is no longer wanted
            elif not self._try("install"):
                self._wait_for("install")

    def release(self, boundary: Boundary) -> None:
        with self._lock:
            if self.target is boundary:
                self.target = None
            if self.target is not None:
                return  # another load took over already
            if not self._handles:
                self._pending = None  # a waiting install is no longer wanted
            elif not self._try("remove"):
                self._wait_for("remove")

    def pin(self, boundary: Boundary) -> None:
        """In a forked child (``os.register_at_fork``), before anything else runs: the
        hooks call ``boundary`` from now on and the parent's boundary is dropped for good.
        The lock may have been held at the fork and the maintainer thread is gone: both
        are replaced. Installing torch's hooks, if needed, is ``adopt``'s job."""
        self._lock = threading.Lock()
        self._maintainer = None
        self._pending = None
        old, self.target, self._pinned = self.target, boundary, boundary
        forked = getattr(old, "forked", None)
        if forked is not None and old is not boundary:
            forked()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is pending (tests); True when done."""
        thread = self._maintainer
        if thread is not None:
            thread.join(timeout)
        return self._pending is None

    # --- changing torch's dicts ----------------------------------------------------------

    def _try(self, op: str) -> bool:
        """Install or remove now if no thread is inside an optimizer step; True if done.

        The check and the change run without a thread switch: the switch interval is
        raised for the few microseconds they take, and nothing between them releases
        the GIL, so no thread can enter ``Optimizer.step`` in between.
        """
        from torch.optim import optimizer as optim_mod

        old = sys.getswitchinterval()
        sys.setswitchinterval(1.0)
        try:
            if any_thread_inside("wrapper", optim_mod.__file__):  # in Optimizer.step's
                return False
            if op == "install":
                if not self._handles:
                    self._handles = [
                        optim_mod.register_optimizer_step_pre_hook(self.before_step),
                        optim_mod.register_optimizer_step_post_hook(self.after_step),
                    ]
            else:
                handles, self._handles = self._handles, []
                for handle in handles:
                    handle.remove()
            self._pending = None
            return True
        finally:
            sys.setswitchinterval(old)

    def _wait_for(self, op: str) -> None:
        self._pending = op
        thread = self._maintainer
        if thread is None or not thread.is_alive():
            thread = threading.Thread(target=self._maintain, name="torchdbg-hooks", daemon=True)
            self._maintainer = thread
            thread.start()

    def _maintain(self) -> None:
        """Retry the pending change until a moment without a step (touches no tensors)."""
        stop = threading.Event()
        while True:
            with self._lock:
                op = self._pending
                if op is None or self._try(op):
                    self._maintainer = None
                    return
            stop.wait(RETRY_S)


#: The process's hooks (one per process, whichever extension instance is loaded).
HOOKS = TorchHooks()
