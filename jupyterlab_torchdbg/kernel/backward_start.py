"""A backward pass about to start: the models a running cell has just made.

Why. A loop without torch.optim is read at the end of its backward passes, through hooks
on its model's parameters (backward_boundary.py), which are registered at cell starts
and at ``watch()``. A model made in the training cell itself (the usual notebook: the
model, then its hand-written loop, in one cell) had no hook for the whole run: the panel
showed nothing, no norm and no alarm, until the next cell.

How, with no frame of ours in a backward's traceback. The first thing
``torch.autograd.graph._engine_run_backward`` (the engine call ``torch.autograd.backward``
makes; ``Tensor.backward`` calls that) does is ask its module's logger for its level, to
decide whether to log the graph. That module global is replaced by a stand-in that
forwards everything to the real logger and, from ``getEffectiveLevel``, calls the step
boundary's listener with the frame that called the engine, then returns the real level:
our code runs before the engine starts and has returned before it runs, so an error in
the user's backward shows exactly the frames it shows without the extension (R15; a
wrapper around the engine call would add one). The public functions stay the objects
torch made. On the thread that called ``backward()`` and outside any backward pass of
its own, the boundary decides whether to look (``CellLook.backward_starts``: while a
cell runs, no optimizer has stepped in it and no ``watch()`` picks the models, at most
once per ``SCAN_INTERVAL_S``) and hooks the new models found in the user's namespaces
(``BackwardHooks.scan(starting=...)``: never while another thread is inside backward;
nothing is unhooked there). The pass that follows then ends at the boundary: a
hand-updated model made in the cell counts from its first step.
``torch.autograd.grad`` (which accumulates nothing, so is no step) shares the engine call
and is told apart by its caller's code. A torch whose engine call does not read that
logger first gets no stand-in (models made mid-cell then wait for the next cell).

Cost: two Python calls and a compare per backward pass, and a look at the user's
namespaces at most once a second while no optimizer steps. One stand-in per process,
installed when the extension attaches and put back when it detaches (only if still
ours); a failure in ours is counted, never raised into ``backward()`` (R11). A forked
child drops the listener.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType, ModuleType
from typing import Any, Protocol


class _Hooks(Protocol):
    """backward_boundary.py's ``BackwardHooks`` (not imported: the step boundary owns it)."""

    @property
    def attached(self) -> bool: ...

    def scan(self, ns: dict[str, object], watched: None, starting: FrameType | None) -> bool: ...


#: The user's frames looked at above ``backward()`` (innermost first).
USER_FRAMES = 8
#: At most one look at the user's frames per this many seconds.
SCAN_INTERVAL_S = 1.0

#: ``listener(frame)``: the engine call's frame (not started yet), under
#: ``torch.autograd.backward``'s.
Listener = Callable[[FrameType], None]


class _LevelProbe:
    """Stands in for ``torch.autograd.graph``'s logger: forwards everything to it; its
    ``getEffectiveLevel`` (asked once at the start of every engine call) first tells the
    hook which frame called the engine."""

    __slots__ = ("_hook", "_real")

    def __init__(self, real: logging.Logger, hook: BackwardStartHook) -> None:
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_hook", hook)

    def getEffectiveLevel(self) -> int:
        self._hook.engine_starts(sys._getframe(1))
        return int(self._real.getEffectiveLevel())

    def __getattr__(self, name: str) -> Any:  # Any: whatever the real logger's attribute is
        return getattr(self._real, name)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self._real, name, value)


class BackwardStartHook:
    """The process's stand-in logger in torch's engine call and the listener it calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.listener: Listener | None = None
        self.on_error: Callable[[str], None] = lambda where: None
        #: (module, real logger, stand-in) when installed.
        self._installed: tuple[ModuleType, logging.Logger, _LevelProbe] | None = None
        self._backward_code: CodeType | None = None

    @property
    def installed(self) -> bool:
        return self._installed is not None

    def adopt(self, listener: Listener, on_error: Callable[[str], None]) -> bool:
        """Install the stand-in (once) and call ``listener`` from now on; False when this
        torch's engine call does not read its logger first (see the module docstring)."""
        with self._lock:
            self.listener, self.on_error = listener, on_error
            if self._installed is None:
                self._install()
            return self._installed is not None

    def release(self, listener: Listener) -> None:
        """Stop calling ``listener``; put torch's logger back if the stand-in is ours."""
        with self._lock:
            if self.listener != listener:  # bound methods: equal, not the same object
                return
            self.listener = None
            if self._installed is not None:
                module, real, probe = self._installed
                if getattr(module, "log", None) is probe:
                    setattr(module, "log", real)  # noqa: B010 (a module attribute)
                self._installed = None

    def forked(self) -> None:
        """In a forked child: the parent's listener is not ours to call."""
        self._lock = threading.Lock()
        self.listener = None

    def _install(self) -> None:
        import logging

        try:
            from torch import autograd
            from torch.autograd import graph
        except Exception:
            return
        run = getattr(getattr(graph, "_engine_run_backward", None), "__code__", None)
        backward = getattr(autograd, "backward", None)
        code = getattr(getattr(backward, "__wrapped__", backward), "__code__", None)
        real = getattr(graph, "log", None)
        if run is None or code is None or not isinstance(real, logging.Logger):
            return
        if run.co_names[:2] != ("log", "getEffectiveLevel"):
            return  # not the engine call this stand-in was written against
        self._backward_code = code
        probe = _LevelProbe(real, self)
        setattr(graph, "log", probe)  # noqa: B010 (a stand-in, not a Logger)
        self._installed = (graph, real, probe)

    def engine_starts(self, engine_frame: FrameType) -> None:
        """The engine call is starting (its logger was asked): a ``backward()`` (not
        ``autograd.grad``) tells the listener the frame that called it. Never raises."""
        listener = self.listener
        if listener is None:
            return
        try:
            caller = engine_frame.f_back
            if caller is not None and caller.f_code is self._backward_code:
                listener(engine_frame)
        except Exception:
            self.on_error("backward_start")


class CellLook:
    """Whether a backward about to start looks for the models the running cell made:
    while a cell runs in which no optimizer has stepped and no ``watch()`` picks the
    models (``on``), at most once per ``SCAN_INTERVAL_S``. ``hooks`` is the step
    boundary's ``BackwardHooks``."""

    def __init__(self, hooks: _Hooks) -> None:
        self.hooks = hooks
        self.on = False
        self._next = 0.0

    def cell_started(self, watching: bool) -> None:
        self.on, self._next = not watching, 0.0

    def backward_starts(self, engine_frame: FrameType) -> None:
        """The listener: hook the cell's new models before this pass runs."""
        if not self.on or not self.hooks.attached:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + SCAN_INTERVAL_S
        self.hooks.scan(user_names(engine_frame.f_back), None, starting=engine_frame)


def user_names(frame: FrameType | None) -> dict[str, object]:
    """The names the user's code sees above ``frame`` (torch's own and this package's
    frames skipped): the module-level namespaces of the first user frames (a notebook
    cell's code runs in the notebook's namespace; a function defined there sees it as
    its globals). A function's own locals are not read: on this Python, reading them
    makes a copy the frame keeps, which would hold a deleted model alive (R24)."""
    import torch

    skip = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
    ns: dict[str, object] = {}
    f, seen = frame, 0
    while f is not None and seen < USER_FRAMES:
        if not f.f_code.co_filename.startswith(skip):
            seen += 1
            for k, v in list(f.f_globals.items()):
                if isinstance(k, str):
                    ns.setdefault(k, v)
        f = f.f_back
    return ns


#: The process's wrapper (one per process, whichever extension instance is loaded).
STARTS = BackwardStartHook()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=STARTS.forked)
