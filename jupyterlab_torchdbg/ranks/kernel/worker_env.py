"""The kernel side of worker discovery: what every process the notebook starts inherits.

``install(address, key)`` (called by the kernel side on load) makes the processes the
notebook starts from now on attach by themselves, and returns the cleanup that undoes
it all (on unload):

- ``TORCHDBG_ENDPOINT`` / ``TORCHDBG_KEY`` / ``TORCHDBG_JOB_ID`` (/ ``TORCHDBG_JOB_CELL``)
  in ``os.environ`` (for hosts the notebook does not start processes on: remote_env.py);
- the boot directory first on ``PYTHONPATH``: its ``sitecustomize`` makes spawned
  interpreters (mp.spawn, ``!torchrun``, ``!python train.py``) workers once they
  import torch (boot/sitecustomize.py);
- fork children become workers (activation.py, ``os.register_at_fork``; the handler
  stays registered, since Python cannot remove one, but does nothing once unloaded);
- ``torch.multiprocessing.spawn._wrap`` patched now, or when torch is imported
  (mp_wrap.py), and put back.

Environment variables are put back to what they were before ``install``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from ...kernel.torch_import import TorchImportWatcher
from ..wire import transport as wire
from ..wire.envelope import JOB_ENV, job_of
from ..worker import activation, mp_wrap

#: The directory holding the boot ``sitecustomize.py`` (put on PYTHONPATH).
BOOT_DIR = str(Path(__file__).resolve().parent.parent / "worker" / "boot")
_NAMES = (wire.ENDPOINT_ENV, wire.KEY_ENV, JOB_ENV, wire.CELL_ENV, "PYTHONPATH")
_installed = False


def install(
    address: str,
    key: str,
    cell_id: str | None = None,
    *,
    watch_torch: bool = True,
    job: str | None = None,
) -> Callable[[], None]:
    """Publish the endpoint (and the job its messages must name: ``job``, else the
    key's) to the processes the notebook starts; returns the cleanup.
    ``watch_torch=False``: the caller (the extension, which watches ``import torch``
    already: one watcher per kernel) calls ``torch_imported()`` instead. Never raises."""
    global _installed
    saved = {name: os.environ.get(name) for name in _NAMES}
    remove_watcher: Callable[[], None] | None = None
    try:
        os.environ[wire.ENDPOINT_ENV] = address
        os.environ[wire.KEY_ENV] = key
        os.environ[JOB_ENV] = job or job_of(key)
        set_cell(cell_id)
        path = os.environ.get("PYTHONPATH", "")
        parts = [p for p in path.split(os.pathsep) if p and p != BOOT_DIR]
        os.environ["PYTHONPATH"] = os.pathsep.join([BOOT_DIR, *parts])
        activation.enable_fork(True)
        _installed = True
        if "torch" in sys.modules:
            mp_wrap.patch()
        elif watch_torch:
            remove_watcher = TorchImportWatcher(_patch_quietly).install()
    except Exception:
        pass

    def cleanup() -> None:
        global _installed
        try:
            _installed = False
            activation.enable_fork(False)
            if remove_watcher is not None:
                remove_watcher()
            mp_wrap.unpatch()
            for name in (wire.ENDPOINT_ENV, wire.KEY_ENV, JOB_ENV, wire.CELL_ENV):
                _restore(name, saved[name])
            path = os.environ.get("PYTHONPATH", "")
            parts = [p for p in path.split(os.pathsep) if p and p != BOOT_DIR]
            _restore("PYTHONPATH", os.pathsep.join(parts) if parts else saved["PYTHONPATH"])
        except Exception:
            pass

    return cleanup


def set_cell(cell_id: str | None) -> None:
    """The notebook cell running now (``TORCHDBG_JOB_CELL`` for workers started from it)."""
    if cell_id:
        os.environ[wire.CELL_ENV] = cell_id
    else:
        os.environ.pop(wire.CELL_ENV, None)


def _restore(name: str, value: str | None) -> None:
    if value is None or value == "":
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def torch_imported() -> None:
    """torch was just imported (``install(..., watch_torch=False)``): patch mp's _wrap."""
    _patch_quietly()


def _patch_quietly() -> None:
    try:
        if _installed:
            mp_wrap.patch()
    except Exception:
        pass
