"""The raised exception itself: type, module and message, and a SyntaxError's position.

Both read the exception with one guarded access per field: a ``__str__`` that raises
or a property that fails gives ``"n/a"`` (R17, R20), never an error inside the tool.
Fields are read through ``BaseException``'s / ``SyntaxError``'s own descriptors, so a
subclass's property never runs (R54). The message is the one place user code may run:
``str(exc)`` is called freely only when the class keeps the builtin ``__str__`` and its
``args`` are plain builtin values; otherwise (a ``__str__`` written in Python, or a user
object in ``args``) only while the capture's budget lasts. IPython has just made the same
call to print the traceback, so it returned once already.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING

from ...safe_read import type_module
from ..cells import CellMap
from ..summarize import NA, safe_text, type_name
from ..summarize.budget import Budget
from .bounds import Limits
from .origin import display_file, origin_of

if TYPE_CHECKING:
    from ....protocol import messages as m

_PLAIN = (str, int, float, bool, type(None), bytes)
_C_SLOTS = (types.WrapperDescriptorType, types.MethodDescriptorType)
_ARGS = BaseException.__dict__["args"]


def own_attr(tp: type, name: str) -> object:
    """``name`` as found in ``tp``'s MRO class dicts (no metaclass, no descriptor call)."""
    for klass in type.__dict__["__mro__"].__get__(tp):
        d = type.__dict__["__dict__"].__get__(klass)
        if name in d:
            return d[name]
    return None


def str_runs_no_user_code(exc: BaseException) -> bool:
    """``str(exc)`` is a builtin ``__str__`` over builtin values: no user code can run."""
    try:
        if type(own_attr(type(exc), "__str__")) not in _C_SLOTS:
            return False
        args = _ARGS.__get__(exc)
        return type(args) is tuple and all(type(a) in _PLAIN for a in args)
    except Exception:
        return False


def exception_summary(
    exc: BaseException, limit: int, budget: Budget | None = None
) -> m.ExceptionInfo:
    """Type, module and message (cut to ``limit``); a ``__str__`` that raises -> "n/a",
    one that could run user code once ``budget`` has run out -> "n/a" (R54)."""
    mod = type_module(exc)
    try:
        if budget is not None and budget.expired() and not str_runs_no_user_code(exc):
            budget.skipped += 1
            raise TimeoutError
        text = str(exc)
        if type(text) is not str:
            raise TypeError
        text, cut = safe_text(text, limit)
        broken = False
    except Exception:
        text, cut, broken = NA, False, True
    out: m.ExceptionInfo = {
        "type": type_name(exc),
        "module": mod,
        "message": text,
        "message_truncated": cut,
    }
    if broken:
        out["message_unavailable"] = True
    return out


def syntax_details(
    exc: BaseException, cells: CellMap | None, limits: Limits
) -> m.ExceptionInfoSyntax | None:
    if not issubclass(type(exc), SyntaxError):
        return None

    # SyntaxError's fields are plain attributes set by the parser; a subclass could make
    # them properties, hence SyntaxError's own descriptors and exact-type checks.
    def read(name: str) -> object:
        try:
            return SyntaxError.__dict__[name].__get__(exc)
        except Exception:
            return None

    def number(name: str) -> int | None:
        v = read(name)
        return v if type(v) is int else None

    out: m.ExceptionInfoSyntax = {
        "lineno": number("lineno"),
        "offset": number("offset"),
        "end_lineno": number("end_lineno"),
        "end_offset": number("end_offset"),
    }
    text = read("text")
    out["text"] = safe_text(text.rstrip("\n"), limits.line_chars)[0] if type(text) is str else None
    msg = read("msg")
    out["msg"] = safe_text(msg, limits.line_chars)[0] if type(msg) is str else None
    filename = read("filename")
    if type(filename) is str:
        run = cells.lookup(filename) if cells is not None else None
        origin = "cell" if run is not None else origin_of(filename, cells)
        out["file"] = display_file(filename, origin, run)
        out["origin"] = origin
        if run is not None:
            out["cell_id"] = run.cell_id
            out["execution_count"] = run.execution_count
    return out
