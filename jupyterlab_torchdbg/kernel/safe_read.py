"""Reading a user value without running its code: its type's name, one guarded field.

Nothing here calls ``repr``, ``str``, ``len``, ``bool`` or ``__eq__`` on a user object.
Each field is read on its own (``try_read``), so a tensor subclass whose ``.shape``
raises still shows its dtype; a field that raises becomes ``"n/a"`` (R17). Text is cut
and made encodable (lone surrogates, R20); big ints travel as text. Also every size
bound of a summary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import SupportsIndex, SupportsInt, TypeVar

_T = TypeVar("_T")

NA = "n/a"

#: A local left unread because the capture's time budget ran out (R54).
NOT_READ = "not read (time budget)"

#: Tensors with at most this many elements get a finite check / integer min-max.
SMALL_NUMEL = 100_000

#: Strings are shown up to this many characters.
MAX_STR = 120

#: Variable names are cut to this length.
MAX_NAME = 200

#: Tensor items shown inside a list/tuple (e.g. ``TensorDataset.tensors``).
MAX_ITEMS = 8

#: Parameters visited per module (param count, devices, dtypes); beyond it -> "at least".
MAX_PARAMS = 20_000

#: JavaScript numbers are exact up to 2**53; larger ints travel as text.
MAX_SAFE_INT = 2**53


def safe_text(value: str, limit: int = MAX_STR) -> tuple[str, bool]:
    """Cut ``value`` to ``limit`` characters and make it encodable (lone surrogates, R20).

    Returns the text and whether it was cut.
    """
    cut = len(value) > limit
    if cut:
        value = value[:limit]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value, cut


def type_name(value: object) -> str:
    """The qualified name of ``type(value)``, read from the type (never the object) through
    ``type``'s own descriptor (a metaclass property never runs)."""
    try:
        name = type.__dict__["__qualname__"].__get__(type(value))
        return safe_text(name, MAX_NAME)[0] if type(name) is str else NA
    except Exception:
        return NA


def type_module(value: object) -> str:
    try:
        mod = type.__dict__["__module__"].__get__(type(value))
        return mod if type(mod) is str else ""
    except Exception:
        return ""


def try_read(fn: Callable[[], _T]) -> _T | str:
    try:
        return fn()
    except Exception:
        return NA


def json_int(value: SupportsInt | SupportsIndex) -> int | str:
    """An int for JSON: exact when JavaScript can hold it, else its decimal text."""
    v = int(value)
    return v if -MAX_SAFE_INT <= v <= MAX_SAFE_INT else str(v)


def dtype_name(dtype: object) -> str:
    s = str(dtype)  # torch.dtype is a torch type, its str is safe
    return s[6:] if s.startswith("torch.") else s


def exact_bool(v: object) -> bool | str:
    return v if type(v) is bool else NA
