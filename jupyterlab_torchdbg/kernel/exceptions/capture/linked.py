"""Exceptions linked to the raised one: its ``__cause__``/``__context__`` chain and the
leaves of an ExceptionGroup, each with where it was raised.

Both are bounded (``Limits.chain``, ``group``, ``group_depth``) and safe against cycles
and broken attributes (R20).
"""

from __future__ import annotations

import builtins
from types import TracebackType
from typing import Any

from ..cells import CellMap
from ..summarize import safe_text
from .bounds import Limits
from .exception import exception_summary
from .origin import display_file, origin_of

_BaseExceptionGroup: type[BaseException] | None = getattr(builtins, "BaseExceptionGroup", None)


def innermost(tb: TracebackType | None, cells: CellMap | None) -> dict[str, object] | None:
    last = None
    for _ in range(200_000):
        if tb is None:
            break
        last, tb = tb, tb.tb_next
    if last is None:
        return None
    code = last.tb_frame.f_code
    run = cells.lookup(code.co_filename) if cells is not None else None
    origin = "cell" if run is not None else origin_of(code.co_filename, cells)
    out = {
        "file": display_file(code.co_filename, origin, run),
        "lineno": last.tb_lineno or 0,
        "function": safe_text(code.co_name, 200)[0],
    }
    if run is not None:
        out["cell_id"] = run.cell_id
    return out


def exception_chain(
    exc: BaseException, cells: CellMap | None, limits: Limits
) -> list[dict[str, Any]]:
    """``__cause__`` / ``__context__`` links from the raised exception down (cycle-safe)."""
    out: list[dict[str, Any]] = []
    seen = {id(exc)}
    cur: BaseException | None = exc
    while cur is not None and len(out) < limits.chain:
        try:
            cause = cur.__cause__
            context = cur.__context__
            suppress = bool(cur.__suppress_context__)
        except Exception:
            break
        if cause is not None:
            nxt, relation = cause, "cause"
        elif context is not None and not suppress:
            nxt, relation = context, "context"
        else:
            break
        if id(nxt) in seen:  # a __cause__/__context__ cycle (R20)
            break
        seen.add(id(nxt))
        item = {"relation": relation, **exception_summary(nxt, limits.chain_message_chars)}
        where = innermost(nxt.__traceback__, cells)
        if where is not None:
            item["where"] = where
        out.append(item)
        cur = nxt
    return out


def group_leaves(exc: BaseException, cells: CellMap | None, limits: Limits) -> list[dict[str, Any]]:
    """The leaves of an ExceptionGroup (nested groups flattened, bounded), else []."""
    if _BaseExceptionGroup is None or not issubclass(type(exc), _BaseExceptionGroup):
        return []
    out: list[dict[str, Any]] = []

    def visit(group: Any, path: list[int], depth: int) -> None:
        subs = group.exceptions  # a tuple set by BaseExceptionGroup itself
        if type(subs) is not tuple:
            return
        for i, sub in enumerate(subs):
            if len(out) >= limits.group:
                return
            if issubclass(type(sub), _BaseExceptionGroup) and depth < limits.group_depth:
                visit(sub, [*path, i], depth + 1)
                continue
            item = {"path": [*path, i], **exception_summary(sub, limits.chain_message_chars)}
            where = innermost(getattr(sub, "__traceback__", None), cells)
            if where is not None:
                item["where"] = where
            out.append(item)

    try:
        visit(exc, [], 0)
    except Exception:
        pass
    return out
