"""The ``watch()`` registry: the models (and optimizers) the user named explicitly.

The gradient monitor names and scopes parameters by it (grads/naming.py); the memory
breakdown counts watched models that live outside the notebook's namespace. Handles hold
models and optimizers by weakref only (R24); the version moves on with every change, so
a plan built under an older version is rebuilt.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.nn import Module
    from torch.optim import Optimizer


class WatchHandle:
    """What ``watch()`` returns: ``.remove()`` ends the watch; also a context manager.

    Holds the model and optimizer by weakref only: deleting the model ends the watch.
    """

    def __init__(
        self,
        model: Module,
        optimizer: Optimizer | None = None,
        stride: int | None = None,
        skip_nonfinite: bool = False,
        rerun_forward: bool = False,
    ) -> None:
        self._model = weakref.ref(model)
        self._optimizer = None if optimizer is None else weakref.ref(optimizer)
        self.stride = stride
        #: Skip optimizer steps whose gradients are NaN/Inf (grads/nonfinite.py).
        self.skip_nonfinite = skip_nonfinite
        #: The user's word that the model's forward may be re-run at a non-finite step
        #: without a click (grads/rerun.py, R53).
        self.rerun_forward = rerun_forward
        self.removed = False

    @property
    def model(self) -> Module | None:
        return self._model()

    @property
    def optimizer(self) -> Optimizer | None:
        return None if self._optimizer is None else self._optimizer()

    @property
    def active(self) -> bool:
        if self.removed or self._model() is None:
            return False
        return self._optimizer is None or self._optimizer() is not None

    def remove(self) -> None:
        """Stop watching (idempotent)."""
        global _version
        with _lock:
            self.removed = True
            if self in _watches:
                _watches.remove(self)
            _version += 1

    def __enter__(self) -> WatchHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        model = self._model()
        kind = type(model).__name__ if model is not None else "dead model"
        state = "active" if self.active else "removed"
        skip = ", skip_nonfinite" if self.skip_nonfinite else ""
        stride = self.stride or "auto"
        return f"<jupyterlab_torchdbg watch of {kind} ({state}, stride={stride}{skip})>"


_lock = threading.Lock()
_watches: list[WatchHandle] = []
_version = 0


def add_watch(
    model: Module,
    optimizer: Optimizer | None = None,
    stride: int | None = None,
    skip_nonfinite: bool = False,
    rerun_forward: bool = False,
) -> WatchHandle:
    global _version
    handle = WatchHandle(model, optimizer, stride, skip_nonfinite, rerun_forward)
    with _lock:
        _watches.append(handle)
        _version += 1
    return handle


def watches() -> tuple[int, list[WatchHandle]]:
    """(version, active watches); dead ones are dropped (the version moves on)."""
    global _version
    with _lock:
        alive = [w for w in _watches if w.active]
        if len(alive) != len(_watches):
            _watches[:] = alive
            _version += 1
        return _version, list(alive)


def clear_watches() -> None:
    """Forget every watch (tests; a fresh kernel state)."""
    global _version
    with _lock:
        for w in _watches:
            w.removed = True
        _watches.clear()
        _version += 1


def watch_version() -> int:
    """The registry's version now (it moves on with every add, remove or death)."""
    return _version
