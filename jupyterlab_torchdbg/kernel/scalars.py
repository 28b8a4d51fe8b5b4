"""``log(loss=..., acc=...)``: record scalar series from a training loop.

Cheap enough to call every step: a plain float is recorded as it is, another CPU value
becomes a float right away, a device tensor is kept (detached) until the next flush,
where all of them are copied to the host at once, so logging a CUDA loss adds no
synchronisation per call.

Never raises into the caller, whatever it is given (R42). What is recorded:

- real numbers (``int`` of any size, ``bool``, ``float``, ``Decimal``, ``Fraction``,
  numpy scalars and one-element arrays of bool, integer or float dtype, any other
  ``numbers.Real`` or object with ``__float__``/``__index__``): their value as a float;
  NaN and ±Inf as they are (the wire encodes them); a value too large for a float
  (``10**400``) as ±Inf;
- one-element tensors of any real dtype (bool, integer, float16, bfloat16, the float8
  kinds, quantized) on any device, with or without ``requires_grad``: their value.

What is skipped, with a warning: complex values (Python, numpy or tensor; pass
``.real`` or ``abs()``), tensors and arrays of more or fewer than one element, tensors on
the ``meta`` device (they hold no value), ``None``, strings and any other object, and
values whose conversion raises. A ``step`` that is not a finite real number on the host
(``10**400``, NaN, a CUDA tensor: reading it would synchronise) is ignored with a warning
and the series count their own calls.

Warnings are bounded (R44): one per (kind, series name), at most ``MAX_WARNINGS`` per
kernel process, then one "further warnings suppressed" line and silence. A warning that
the user's filters turn into an error is swallowed.
"""

from __future__ import annotations

import math
import numbers
import operator
import sys
import threading
import warnings
from collections.abc import Mapping
from decimal import Decimal
from types import ModuleType
from typing import TYPE_CHECKING, Any, Union

from .extension import current
from .log_rows import ROW_MIN_NAMES, log_row
from .stream import limits

if TYPE_CHECKING:
    from torch import Tensor, dtype

#: Distinct warnings ``log()`` shows per kernel process before it goes quiet.
MAX_WARNINGS = 20
#: Characters of a series name or type name shown in a warning.
SHOWN_CHARS = 80
_PREFIX = "jupyterlab_torchdbg.log: "

_warn_lock = threading.Lock()
#: Keys of the warnings shown (at most MAX_WARNINGS).
_warned: set[str] = set()
_suppressed = False

#: Tensor dtypes a device value is kept in as it is (stacked with the others at flush).
_PLAIN_DTYPES: frozenset[dtype] | None = None
#: ``torch.Tensor`` once torch is imported (checked first: the common case).
_TENSOR: type[Tensor] | None = None


#: What a logged value reads as: a float, a detached device tensor (resolved at flush), or
#: why it is not recorded.
Read = Union[float, "Tensor", "_Skip"]


class _Skip:
    """Why a value is not recorded: ``kind`` keys the warning, ``reason`` explains."""

    __slots__ = ("kind", "reason")

    def __init__(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason


def _type_name(value: object) -> str:
    return type(value).__name__[:SHOWN_CHARS]


def _not_a_number(value: object) -> _Skip:
    return _Skip(
        "type",
        f"is a {_type_name(value)}, not a real number or a one-element tensor",
    )


def _complex(value: object) -> _Skip:
    return _Skip("complex", f"is complex ({_type_name(value)}); pass .real or abs()")


def _elements(count: object) -> _Skip:
    return _Skip(
        "shape",
        f"has {count} elements; log() records scalars (pass loss.mean() or a number)",
    )


def _shown(name: str) -> str:
    """A series name for a warning: short, and escaped when not plainly printable."""
    if 0 < len(name) <= SHOWN_CHARS and name.isprintable():
        return name
    cut = "…" if len(name) > SHOWN_CHARS else ""
    return repr(name[:SHOWN_CHARS]) + cut


def _stacklevel() -> int:
    """The stack level of the first frame outside this package (the user's call)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith(
        "jupyterlab_torchdbg"
    ):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _warn(key: str, message: str) -> None:
    """Show ``message`` once per ``key``, at most MAX_WARNINGS in all; never raises."""
    global _suppressed
    try:
        with _warn_lock:
            if key in _warned or _suppressed:
                return
            if len(_warned) >= MAX_WARNINGS:
                _suppressed = True
                message = (
                    f"further warnings suppressed (at most {MAX_WARNINGS} per kernel "
                    "process); values log() cannot record are still ignored"
                )
            else:
                _warned.add(key)
        # Lone surrogates (in a name or a type name) cannot go out on stderr: escape them.
        text = (_PREFIX + message).encode("utf-8", "backslashreplace").decode("utf-8")
        warnings.warn(text, RuntimeWarning, stacklevel=_stacklevel())
    except Exception:
        pass  # e.g. warnings turned into errors by the user's filters


# A number-like user value (int, Decimal, Fraction, numpy scalar, __float__), compared with 0
# Any: when too large for a float (no protocol says "float() and > 0")
def _real(value: Any) -> float:
    """``float(value)``; a value too large for a float becomes ±Inf."""
    try:
        return float(value)
    except ArithmeticError:  # OverflowError (10**400, a huge Fraction), FloatingPointError
        return math.inf if value > 0 else -math.inf


def _plain_dtypes(torch: ModuleType) -> frozenset[dtype]:
    global _PLAIN_DTYPES
    if _PLAIN_DTYPES is None:
        _PLAIN_DTYPES = frozenset((torch.float32, torch.float16, torch.bfloat16, torch.float64))
    return _PLAIN_DTYPES


def _tensor(t: Tensor) -> Read:
    """A one-element tensor's value: a float (CPU), a detached float tensor (device)."""
    n = t.numel()
    if n != 1:
        return _elements(n)
    torch = sys.modules["torch"]
    kind = t.device.type
    dtype = t.dtype
    plain = _plain_dtypes(torch)
    if kind != "cpu" and dtype in plain and t.layout is torch.strided and kind != "meta":
        return t.detach()  # the hot path: resolved with the others at flush
    if dtype.is_complex:
        return _complex(t)
    if kind == "meta":
        return _Skip("meta", "is a tensor on the meta device (it holds no value)")
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if getattr(t, "is_quantized", False):
        t = t.dequantize()
    if kind == "cpu":
        try:
            return _real(t.reshape(()).item())
        except Exception:  # a dtype whose item() torch does not implement
            return _real(t.reshape(()).to(torch.float32).item())
    if t.dtype not in plain:
        # bool, integer and float8 values would not stack with the others at flush
        # (float8 does not promote): make them float32 on their device, no sync.
        t = t.to(torch.float32)
    return t


def _array(a: Any) -> Read:  # Any: a numpy scalar or array (numpy is not a dependency)
    """A numpy scalar or array of one element: its value; else why not."""
    size = a.size
    if size != 1:
        return _elements(size)
    kind = a.dtype.kind
    if kind in "biuf":
        return _real(a.item())
    if kind == "c":
        return _complex(a)
    if kind == "O":
        v = a.item()
        return _not_a_number(v) if hasattr(v, "dtype") else _read(v)
    return _not_a_number(a)  # strings, bytes, datetimes, records


def _read(value: Any) -> Read:  # Any: whatever the user logged, read by duck typing
    """A float, a detached device tensor to resolve at flush, or a ``_Skip``."""
    global _TENSOR
    if _TENSOR is None:
        torch = sys.modules.get("torch")
        _TENSOR = getattr(torch, "Tensor", None)
    if type(value) is _TENSOR:
        return _tensor(value)
    if isinstance(value, int):  # bool too; any size
        return _real(value)
    if isinstance(value, float):
        return float(value)
    if value is None or isinstance(value, (str, bytes, bytearray)):
        return _not_a_number(value)
    if callable(getattr(value, "numel", None)) and hasattr(value, "device"):
        if hasattr(value, "detach") and hasattr(value, "dtype"):
            return _tensor(value)
    if callable(getattr(value, "item", None)) and hasattr(value, "dtype"):
        if isinstance(getattr(value, "size", None), int):
            return _array(value)
    if isinstance(value, Decimal):
        return math.nan if value.is_snan() else _real(value)
    if isinstance(value, numbers.Real):
        return _real(value)
    if isinstance(value, numbers.Complex):
        return _complex(value)
    cls = type(value)
    if hasattr(cls, "__float__"):
        return _real(value)
    if hasattr(cls, "__index__"):
        return _real(operator.index(value))
    return _not_a_number(value)


def _value(name: str, value: object) -> float | Tensor | None:
    """``value`` as the stream records it, or None (after one bounded warning)."""
    try:
        v = _read(value)
    except Exception:
        v = _Skip("error", f"({_type_name(value)}) could not be read as a number")
    if isinstance(v, _Skip):
        _warn(f"{v.kind}:{name}", f"{_shown(name)} {v.reason}. Ignored.")
        return None
    return v


def _step(step: object) -> float | None:
    """The x value ``step`` gives, or None (after a warning) when it is unusable."""
    if type(step) is int:
        try:
            return float(step)
        except OverflowError:
            x = math.inf
    else:
        try:
            v = _read(step)
        except Exception:
            v = None
        x = v if isinstance(v, float) else math.nan
    if math.isfinite(x):
        return x
    _warn(
        "step",
        "step must be a finite real number on the host (not a device tensor); "
        "ignored, each series counts its own calls",
    )
    return None


def log(*steps: object, **values: object) -> None:
    """Record one point of each named series, e.g. ``log(loss=loss, acc=acc)``.

    The first positional argument (optional) is the step, the x value; by default each
    series counts its own calls. More positional values are ignored with a warning (they
    have no name to record under). Never raises into the training loop; see the module
    docstring for what is recorded and what is skipped with a (bounded) warning. Does
    nothing (cheaply) when the extension is not loaded.
    """
    log_values(steps, values)


def _from_mapping(
    steps: tuple[object, ...], values: dict[str, object]
) -> tuple[tuple[object, ...], dict[str, object]]:
    """``log(metrics)`` / ``log(step, metrics)``: the mapping's items are values (the
    keywords too; a keyword wins over the same key). A dict of str keys is used as it
    is: no copy, so a wide call costs no keyword rebuild. Keys that are not a str are
    named by ``_name`` on the general path (the row path's layouts refuse them)."""
    mapping = steps[-1]
    steps = steps[:-1]
    if type(mapping) is not dict:
        mapping = dict(mapping)  # type: ignore[call-overload]
    return steps, ({**mapping, **values} if values else mapping)


def _name(key: object) -> str:
    """A dict key as a series name: a str as it is, anything else ``str(key)`` (warned)."""
    if type(key) is str:
        return key
    shown = _shown(repr(key))
    _warn(f"key:{shown}", f"the key {shown} is not a str; logged as str(key)")
    return str(key)


def log_values(steps: tuple[object, ...], values: dict[str, object]) -> None:
    """``log(*steps, **values)`` without expanding the keywords again (the package's
    ``log`` calls this: a second ``**values`` of 400 names costs tens of µs)."""
    ext = current()
    if ext is None:
        return
    try:
        if steps and isinstance(steps[-1], Mapping):
            steps, values = _from_mapping(steps, values)
        if len(values) >= ROW_MIN_NAMES and log_row(ext.stream, steps, values):
            return  # many plain numbers: one row, flushed when due (log_rows.py)
        step = steps[0] if steps else None
        if len(steps) > 1:
            _warn(
                "positional",
                f"log() takes the step and a dict of values positionally; {len(steps) - 1} "
                "more were ignored (log(step, loss=loss) or log(step, {'loss': loss}))",
            )
        x = None if step is None else _step(step)
        stream = ext.stream
        for name, value in values.items():
            if type(name) is not str:
                name = _name(name)
            v = value if type(value) is float else _value(name, value)
            if v is not None and not stream.record(name, v, x):
                _warn(
                    "limit",
                    f"more than {limits.MAX_SERIES} series: {_shown(name)} and any other "
                    "new name are ignored (clear the history to make room)",
                )
        stream.maybe_flush()
    except Exception:
        try:
            ext.count_error("log")
        except Exception:
            pass
