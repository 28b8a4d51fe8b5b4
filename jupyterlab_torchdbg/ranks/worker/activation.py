"""How a process becomes a worker: one ``Worker`` per process, whichever path led here.

- **spawn / torchrun / any subprocess** of the notebook: the boot ``sitecustomize``
  (boot/sitecustomize.py) calls ``entry.torch_imported`` once the process's ``import torch``
  has finished, if the endpoint is in the environment.
- **torch.multiprocessing spawn / start_processes**: the patched ``_wrap`` (mp_wrap.py)
  calls ``activate`` in the child before the user's function runs.
- **fork**: ``os.register_at_fork`` (registered by the kernel side on load,
  worker_env.py, and by every worker for its own forks, e.g. DataLoader workers) calls
  ``forked_child`` in the child: the parent's extension and worker are abandoned (never
  used, never closed: their sockets and threads belong to the parent), a fresh worker
  is pinned as the target of torch's step hooks (``HOOKS.pin``).
- **attach()** in a script started elsewhere (entry.py).

Each path ends in ``HOOKS.adopt(worker)`` (kernel/step_boundary.py: the one registration
site of torch's step hooks) and ``Worker.torch_ready`` (a loop without an optimizer is
found at its model's first call, manual.py). A worker costs nothing until its first optimizer step
(worker.py); a process that never steps (a DataLoader worker) never connects. The
process also reports uncaught exceptions of a rank (``sys.excepthook`` and
``threading.excepthook``, chained: the original hooks run unchanged after) and says
``bye`` at exit.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from types import TracebackType

from ...kernel.step_boundary import HOOKS, StepBoundary
from ...kernel.torch_import import TorchImportWatcher
from ..wire import transport as wire
from .boundary import Worker
from .identity import Origin, launcher

_lock = threading.Lock()
_worker: Worker | None = None
#: Workers inherited across a fork: kept (never collected, never used) so nothing of the
#: parent's zmq state is closed from the child.
_abandoned: list[object] = []
#: Turn fork children into workers (on while the kernel side is loaded, and in workers).
_fork_enabled = False
_fork_registered = False
#: The exception hooks and the exit hook are in place (a fork child inherits them).
_process_hooks = False


def current() -> Worker | None:
    """This process's worker, or None."""
    w = _worker
    return w if w is not None and w.pid == os.getpid() else None


def activate(
    address: str | None = None,
    key: str | None = None,
    then: Callable[[], object] | None = None,
) -> Worker | None:
    """Make this process a worker if an endpoint is known (idempotent; never raises).
    ``then`` runs once torch is imported (now, or when it is), after the hooks."""
    global _worker
    try:
        address = address or os.environ.get(wire.ENDPOINT_ENV)
        key = key or os.environ.get(wire.KEY_ENV)
        if not address or not key:
            return None
        with _lock:
            w = current()
            if w is not None:
                return w
            if isinstance(HOOKS.target, StepBoundary):
                return None  # the notebook's own kernel (attach() in a cell): not a rank
            w = _worker = Worker(address, key)
        _install_process_hooks()
        if "torch" in sys.modules:
            _adopt(w, then)
        else:
            TorchImportWatcher(lambda: _adopt(w, then)).install()
        return w
    except Exception:
        return None


def _adopt(w: Worker, then: Callable[[], object] | None = None) -> None:
    """torch is imported: the step hooks call ``w``."""
    try:
        HOOKS.adopt(w)
    except Exception:
        w.errors["adopt"] += 1
    w.torch_ready()  # a loop without an optimizer is watched too (manual.py)
    if then is not None:
        try:
            then()
        except Exception:
            w.errors["then"] += 1


# --- fork ----------------------------------------------------------------------------


def enable_fork(on: bool) -> None:
    """Fork children become workers while on (the handler is registered once)."""
    global _fork_enabled, _fork_registered
    _fork_enabled = on
    if on and not _fork_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_registered = True


def _after_fork_in_child() -> None:
    if not _fork_enabled:
        return
    try:
        forked_child()
    except Exception:
        pass  # never into the user's fork


def forked_child() -> None:
    """In a fork child: abandon what was inherited, pin a fresh (lazy) worker."""
    global _lock, _worker
    _lock = threading.Lock()  # may have been held at the fork
    inherited = _worker
    if inherited is not None:
        _abandoned.append(inherited)
    _worker = None
    Origin.forked = True
    Origin.spawn_index = None
    Origin.attached = False
    address = os.environ.get(wire.ENDPOINT_ENV)
    key = os.environ.get(wire.KEY_ENV)
    if not address or not key:
        return
    w = _worker = Worker(address, key)
    HOOKS.pin(w)
    _install_process_hooks()
    if "torch" in sys.modules:
        HOOKS.adopt(w)
        w.torch_ready()
    else:
        TorchImportWatcher(lambda: _adopt(w)).install()


# --- the process's own hooks: uncaught exceptions, exit -------------------------------


def _install_process_hooks() -> None:
    """Chain ``sys.excepthook`` / ``threading.excepthook``, ``bye`` at exit, and make
    this worker's own fork children workers. Once: a fork child inherits them, and they
    act on whichever worker is this process's own (``current``)."""
    global _process_hooks
    enable_fork(True)
    if _process_hooks:
        return
    _process_hooks = True
    previous = sys.excepthook

    def excepthook(tp: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        _uncaught(value, fatal=True)
        previous(tp, value, tb)

    sys.excepthook = excepthook
    previous_thread = threading.excepthook

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        _uncaught(args.exc_value, fatal=False)
        previous_thread(args)

    threading.excepthook = thread_excepthook
    atexit.register(_at_exit)


def is_rank(w: Worker) -> bool:
    """A process of a multi-process job (not merely one that imported torch)."""
    if w.agent is not None or launcher() != "torchrun":
        return True
    return "RANK" in os.environ or _dist_up()


def _dist_up() -> bool:
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:
        return False


def _uncaught(exc: object, fatal: bool) -> None:
    try:
        w = current()
        if w is None or not isinstance(exc, Exception) or not is_rank(w):
            return
        if fatal:
            w.failed = True
        w.report(exc)
    except Exception:
        pass


def _at_exit() -> None:
    w = current()
    if w is not None:
        w.close("failed" if w.failed else "exited")
