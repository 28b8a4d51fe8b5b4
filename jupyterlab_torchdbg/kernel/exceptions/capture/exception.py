"""The raised exception itself: type, module and message, and a SyntaxError's position.

Both read the exception with one guarded access per field: a ``__str__`` that raises
or a property that fails gives ``"n/a"`` (R17, R20), never an error inside the tool.
"""

from __future__ import annotations

from typing import Any

from ..cells import CellMap
from ..summarize import NA, safe_text, type_name
from .bounds import Limits
from .origin import display_file, origin_of


def exception_summary(exc: BaseException, limit: int) -> dict[str, Any]:
    """Type, module and message (cut to ``limit``); a ``__str__`` that raises -> "n/a"."""
    try:
        mod = type(exc).__module__
        mod = mod if isinstance(mod, str) else ""
    except Exception:
        mod = ""
    try:
        text = str(exc)
        if type(text) is not str:
            raise TypeError
        text, cut = safe_text(text, limit)
        broken = False
    except Exception:
        text, cut, broken = NA, False, True
    out: dict[str, Any] = {
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
) -> dict[str, object] | None:
    if not isinstance(exc, SyntaxError):
        return None

    # SyntaxError's fields are plain attributes set by the parser; a subclass could make
    # them properties, hence one guarded read each and exact-type checks.
    def read(name: str) -> object:
        try:
            return getattr(exc, name, None)
        except Exception:
            return None

    out: dict[str, Any] = {}
    for attr in ("lineno", "offset", "end_lineno", "end_offset"):
        v = read(attr)
        out[attr] = v if type(v) is int else None
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
