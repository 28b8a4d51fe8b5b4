"""``log(loss=..., acc=...)``: record scalar series from a training loop.

Cheap enough to call every step: a CPU value becomes a float right away, a device tensor
is kept (detached) until the next flush, where all of them are copied to the host at once,
so logging a CUDA loss adds no synchronisation per call.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

from .extension import current

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _scalar(name: str, value: object) -> Any:
    """A float, a detached one-element device tensor, or None (with a warning)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except (TypeError, ValueError, OverflowError):
            # typeshed's numbers.Real declares no __gt__; every concrete Real has one.
            return float("inf") if value > 0 else float("-inf")  # type: ignore[operator]
    numel = getattr(value, "numel", None)
    device = getattr(value, "device", None)
    if callable(numel) and device is not None and hasattr(value, "detach"):
        try:
            if numel() != 1:
                _warn_once(
                    f"shape:{name}",
                    f"jupyterlab_torchdbg.log: {name!s} has {numel()} elements; "
                    "log() records scalars (pass loss.mean() or a number). Ignored.",
                )
                return None
            if getattr(device, "type", "cpu") == "cpu":
                return float(value.detach().reshape(()).item())
            return value.detach()
        except Exception:
            return None
    item = getattr(value, "item", None)  # numpy scalars and 0-d arrays
    if callable(item) and getattr(value, "size", 0) == 1:
        try:
            return float(item())
        except (TypeError, ValueError):
            return None
    _warn_once(
        f"type:{name}",
        f"jupyterlab_torchdbg.log: {name!s} is a {type(value).__name__}, not a number "
        "or a one-element tensor. Ignored.",
    )
    return None


def log(step: int | None = None, /, **values: object) -> None:
    """Record one point of each named series, e.g. ``log(loss=loss, acc=acc)``.

    ``step`` (optional, positional) sets the x value; by default each series counts its
    own calls. Values may be Python or numpy numbers or one-element tensors on any
    device. Never raises into the training loop: bad values are ignored with a warning.
    Does nothing (cheaply) when the extension is not loaded.
    """
    ext = current()
    if ext is None:
        return
    x: float | None = None
    if step is not None:
        try:
            x = float(step)
            if not math.isfinite(x):
                x = None
        except (TypeError, ValueError):
            _warn_once("step", "jupyterlab_torchdbg.log: step must be a number. Ignored.")
    try:
        for name, value in values.items():
            v = _scalar(name, value)
            if v is not None:
                ext.stream.record(name, v, x)
        ext.stream.maybe_flush()
    except Exception:
        ext.count_error("log")
