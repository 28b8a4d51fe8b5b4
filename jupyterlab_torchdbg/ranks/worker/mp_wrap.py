"""torch.multiprocessing's ``_wrap``, wrapped: the spawn index, exceptions, ``bye``.

``torch.multiprocessing.spawn`` / ``start_processes`` run every rank as
``mp.Process(target=_wrap, args=(fn, i, args, error_file))``, looking ``_wrap`` up in
its module when the process starts. Replacing that module attribute reaches every rank:

- **fork**: the kernel's module is patched while the extension is loaded
  (worker_env.py) and put back on unload; the child runs this ``_wrap``.
- **spawn**: the target is pickled by reference, so a rank started from the patched
  kernel unpickles this function; a rank started elsewhere gets it from the boot
  sitecustomize, which patches its own module once torch is imported, before the
  Process object is unpickled.

In the child, this ``_wrap`` records the index (the rank when no process group says
otherwise), makes the process a worker, and calls torch's ``_wrap`` with the user's
function wrapped: an exception is sent to the kernel with the rank's step (and waited
for), then raised on unchanged, so torch's own error file and exit code are as before.
At the end a ``bye`` (exited / failed) goes out and the socket lingers until it is
delivered: a forked rank leaves through ``os._exit``, where no ``atexit`` runs.

In the kernel, ``ProcessContext.join`` is wrapped too (R56): torch's join reaps the
ranks, so it is where their exit codes are known. After each call, every rank it reaped
is told to ``exit_listener`` (the hub: exits.py) with its code and whether torch itself
terminated it because another rank failed (``error_pid`` of the exception it raises).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

from . import activation
from .identity import Origin

#: torch's own ``_wrap`` (set when the module was patched in this process).
_original: Callable[..., None] | None = None
#: torch's own ``ProcessContext.join``.
_original_join: Callable[..., bool] | None = None
#: Told (pid, exit code, stopped by the launcher) of each rank torch's join reaped.
exit_listener: Callable[[int, int, bool], None] | None = None


def _spawn_module() -> ModuleType | None:
    return sys.modules.get("torch.multiprocessing.spawn")


def patch() -> bool:
    """Replace ``torch.multiprocessing.spawn._wrap`` (torch must be imported)."""
    global _original
    if "torch" not in sys.modules:
        return False
    mod = _spawn_module()
    if mod is None:
        import importlib

        mod = importlib.import_module("torch.multiprocessing.spawn")
    _patch_join(mod)
    current = getattr(mod, "_wrap", None)
    if current is _wrap:
        return True
    if current is None:
        return False
    _original = current
    vars(mod)["_wrap"] = _wrap  # (the module's namespace: ModuleType declares no _wrap)
    return True


def unpatch() -> None:
    """Put torch's ``_wrap`` and ``ProcessContext.join`` back if they are still ours."""
    mod = _spawn_module()
    if mod is not None and getattr(mod, "_wrap", None) is _wrap and _original is not None:
        vars(mod)["_wrap"] = _original
    context = getattr(mod, "ProcessContext", None) if mod is not None else None
    if context is not None and vars(context).get("join") is _join:
        context.join = _original_join


def _patch_join(mod: ModuleType) -> None:
    global _original_join
    context = getattr(mod, "ProcessContext", None)
    current = getattr(context, "join", None) if context is not None else None
    if context is None or current is None or current is _join:
        return
    _original_join = current
    context.join = _join


def _join(self: object, *args: object, **kwargs: object) -> bool:
    """torch's ``ProcessContext.join``, then the exit codes of what it reaped."""
    join = _original_join
    if join is None:  # (never: patched only once the original is kept)
        return True
    error: BaseException | None = None
    try:
        return join(self, *args, **kwargs)
    except BaseException as e:
        error = e
        raise
    finally:
        _tell_exits(self, error)


def _tell_exits(context: object, error: BaseException | None) -> None:
    """Each reaped rank's exit code to ``exit_listener``. Never raises."""
    listener = exit_listener
    if listener is None:
        return
    try:
        culprit = getattr(error, "error_pid", None)
        for process in list(getattr(context, "processes", ())):
            # the code torch's join read (never ``exitcode``: that would reap the rest)
            code = getattr(getattr(process, "_popen", None), "returncode", None)
            pid = getattr(process, "pid", None)
            if isinstance(code, int) and isinstance(pid, int):
                stopped = culprit is not None and pid != culprit and code < 0
                listener(pid, code, stopped)
    except Exception:
        pass


def _torch_wrap() -> Callable[..., None]:
    if _original is not None:
        return _original
    mod = _spawn_module()
    if mod is None:
        import importlib

        mod = importlib.import_module("torch.multiprocessing.spawn")
    found = getattr(mod, "_wrap", None)
    if found is None or found is _wrap:
        return _plain_wrap
    return found  # type: ignore[no-any-return]


def _plain_wrap(fn: Callable[..., object], i: int, args: tuple[object, ...], *rest: object) -> None:
    fn(i, *args)


def _wrap(fn: Callable[..., object], i: int, *rest: object, **kwargs: object) -> None:
    """The rank's entry (in the child process)."""
    failed = False
    worker = None
    try:
        Origin.spawn_index = i
        worker = activation.activate()
    except Exception:
        pass

    def run(*args: object, **kw: object) -> object:
        nonlocal failed
        try:
            return fn(*args, **kw)  # (torchdbg: a rank's exception is sent to the notebook)
        except Exception as e:
            failed = True
            if worker is not None:
                worker.failed = True
                worker.report(e)
            raise

    try:
        _torch_wrap()(run, i, *rest, **kwargs)
    finally:
        if worker is not None:
            worker.close("failed" if failed else "exited")
