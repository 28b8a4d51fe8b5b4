"""Exceptions linked to the raised one: its ``__cause__``/``__context__`` chain and the
leaves of an ExceptionGroup, each with where it was raised.

Both are bounded (``Limits.chain``, ``group``, ``group_depth``) and safe against cycles
and broken attributes (R20). Links are read through ``BaseException``'s own descriptors (a
subclass's property never runs) and messages within the capture's budget (R54).
"""

from __future__ import annotations

import builtins
from types import TracebackType
from typing import TYPE_CHECKING, Literal

from ..cells import CellMap
from ..summarize import safe_text
from ..summarize.budget import Budget
from .bounds import Limits
from .exception import exception_summary
from .origin import display_file, origin_of

if TYPE_CHECKING:
    from ....protocol import messages as m

_BaseExceptionGroup: type[BaseException] | None = getattr(builtins, "BaseExceptionGroup", None)
_FIELD = BaseException.__dict__


def _tb(exc: object) -> TracebackType | None:
    try:
        tb = _FIELD["__traceback__"].__get__(exc)
    except Exception:
        return None
    return tb if type(tb) is TracebackType else None


def innermost(tb: TracebackType | None, cells: CellMap | None) -> m.RelatedExceptionWhere | None:
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
    out: m.RelatedExceptionWhere = {
        "file": display_file(code.co_filename, origin, run),
        "lineno": last.tb_lineno or 0,
        "function": safe_text(code.co_name, 200)[0],
    }
    if run is not None:
        out["cell_id"] = run.cell_id
    return out


def _related(s: m.ExceptionInfo) -> m.RelatedException:
    """A summary's fields as a linked exception's (a summary has no ``syntax``)."""
    out: m.RelatedException = {
        "type": s["type"],
        "module": s["module"],
        "message": s["message"],
        "message_truncated": s["message_truncated"],
    }
    if "message_unavailable" in s:
        out["message_unavailable"] = s["message_unavailable"]
    return out


def exception_chain(
    exc: BaseException, cells: CellMap | None, limits: Limits, budget: Budget | None = None
) -> list[m.RelatedException]:
    """``__cause__`` / ``__context__`` links from the raised exception down (cycle-safe)."""
    out: list[m.RelatedException] = []
    seen = {id(exc)}
    cur: BaseException | None = exc
    relation: Literal["cause", "context"]
    while cur is not None and len(out) < limits.chain:
        try:
            cause = _FIELD["__cause__"].__get__(cur)
            context = _FIELD["__context__"].__get__(cur)
            suppress = _FIELD["__suppress_context__"].__get__(cur) is True
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
        summary = exception_summary(nxt, limits.chain_message_chars, budget)
        item: m.RelatedException = {"relation": relation, **_related(summary)}
        where = innermost(_tb(nxt), cells)
        if where is not None:
            item["where"] = where
        out.append(item)
        cur = nxt
    return out


def group_leaves(
    exc: BaseException, cells: CellMap | None, limits: Limits, budget: Budget | None = None
) -> list[m.RelatedException]:
    """The leaves of an ExceptionGroup (nested groups flattened, bounded), else []."""
    if _BaseExceptionGroup is None or not issubclass(type(exc), _BaseExceptionGroup):
        return []
    out: list[m.RelatedException] = []

    def visit(group: BaseException, path: list[int], depth: int) -> None:
        # a tuple set by BaseExceptionGroup itself, read through its own descriptor
        subs = _BaseExceptionGroup.__dict__["exceptions"].__get__(group)
        if type(subs) is not tuple:
            return
        for i, sub in enumerate(subs):
            if len(out) >= limits.group:
                return
            if issubclass(type(sub), _BaseExceptionGroup) and depth < limits.group_depth:
                visit(sub, [*path, i], depth + 1)
                continue
            summary = exception_summary(sub, limits.chain_message_chars, budget)
            item: m.RelatedException = {"path": [*path, i], **_related(summary)}
            where = innermost(_tb(sub), cells)
            if where is not None:
                item["where"] = where
            out.append(item)

    try:
        visit(exc, [], 0)
    except Exception:
        pass
    return out
