"""One kept frame as a message row: origin, source context, the failing span, its locals.

The row's locals are summarised from metadata only (R21) through ``summarize_locals``,
within the capture's time budget (R54);
their live objects go into the capture's ``live`` dict (for the diagnosis), never into
the row. User frames also carry ``_names``, the identifiers of the failing expression,
which the summary keeps first and the diagnosis reads (removed before sending).
"""

from __future__ import annotations

import itertools
import linecache
import os
import re
from collections.abc import Container
from types import CodeType, FrameType, TracebackType

from ..cells import CellMap
from ..summarize import Classifier, safe_text, summarize_locals
from ..summarize.budget import Budget
from .bounds import Limits
from .origin import display_file, origin_of, relative_to_cwd

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def frame_row(
    tb: TracebackType, pos: int, cells: CellMap | None, limits: Limits
) -> dict[str, object]:
    f = tb.tb_frame
    code = f.f_code
    filename = code.co_filename
    lineno = tb.tb_lineno or 0
    out = location_row(filename, lineno, code.co_name, pos, cells, limits)
    span = _span(code, tb.tb_lasti, lineno)
    if span is not None:
        out["span"] = span
    if out["user"]:
        out["_names"] = _names_in(filename, span, lineno)
    return out


def location_row(
    filename: str,
    lineno: int,
    function: str,
    pos: int,
    cells: CellMap | None,
    limits: Limits,
) -> dict[str, object]:
    """A frame row's place: origin, shown file, cell, source context and line. Also for
    frames known only from a traceback's text (loader_error.py)."""
    run = cells.lookup(filename) if cells is not None else None
    origin = "cell" if run is not None else origin_of(filename, cells)
    out: dict[str, object] = {
        "position": pos,
        "origin": origin,
        "user": origin != "library",
        "function": safe_text(function, 200)[0],
        "file": display_file(filename, origin, run),
        "lineno": lineno,
    }
    if origin == "cell":
        out["cell_id"] = getattr(run, "cell_id", None)
        out["execution_count"] = getattr(run, "execution_count", None)
        out["source_changed"] = bool(run is not None and cells and cells.source_changed(run))
    elif origin == "file":
        rel = relative_to_cwd(os.path.abspath(filename))
        if rel is not None:
            out["path"] = rel  # openable through the file browser when cwd is in the root
    lines = [
        safe_text(linecache.getline(filename, n).rstrip("\r\n"), limits.line_chars)[0]
        for n in range(max(1, lineno - limits.context), lineno + limits.context + 1)
    ]
    first = max(1, lineno - limits.context)
    while lines and not lines[-1]:
        lines.pop()
    out["source"] = {"first": first, "lines": lines}
    out["line"] = lines[lineno - first].strip() if 0 <= lineno - first < len(lines) else ""
    return out


def _span(code: CodeType, lasti: int, lineno: int) -> dict[str, int] | None:
    """Lines and columns of the failing expression (Python >= 3.11), for highlighting."""
    positions = getattr(code, "co_positions", None)
    # co_positions is decoded from the start: skip giant code objects (a 10,000-line
    # function) rather than pay for it.
    if positions is None or lasti < 0 or lasti // 2 > 5_000:
        return None
    try:
        pos = next(itertools.islice(positions(), lasti // 2, None))
    except Exception:
        return None
    start, end, col, end_col = pos
    if not start or start != lineno:
        return None
    return {
        "start_line": start,
        "end_line": end if isinstance(end, int) else start,
        "start_col": col if isinstance(col, int) else 0,
        "end_col": end_col if isinstance(end_col, int) else -1,
    }


def _names_in(filename: str, span: dict[str, int] | None, lineno: int) -> list[str]:
    """Identifiers in the failing expression (or the whole line), in order, unique."""
    if span is None:
        text = linecache.getline(filename, lineno)
    else:
        last = min(span["end_line"], span["start_line"] + 20)
        raw = [
            linecache.getline(filename, n).encode("utf-8", "replace")
            for n in range(span["start_line"], last + 1)
        ]
        if raw and span["end_col"] >= 0 and last == span["end_line"]:
            raw[-1] = raw[-1][: span["end_col"]]
        if raw:
            raw[0] = raw[0][span["start_col"] :]  # columns are UTF-8 byte offsets
        text = b"\n".join(raw).decode("utf-8", "replace")
    text = re.sub(r"(?s)'''.*?'''|\"\"\".*?\"\"\"|'[^'\n]*'|\"[^\"\n]*\"|#.*", " ", text)
    return list(dict.fromkeys(_IDENT.findall(text)))[:50]


def add_locals(
    frame: dict[str, object],
    f: FrameType,
    prefer: list[str],
    hidden: Container[str] | None,
    cls: Classifier,
    live: dict[int, object],
    limits: Limits,
    budget: Budget | None = None,
) -> None:
    try:
        local_ns = f.f_locals
        namespace = local_ns is f.f_globals
        items = list(local_ns.items()) if type(local_ns) is dict else []
    except Exception:
        frame["locals"], frame["locals_total"], frame["locals_truncated"] = [], 0, False
        return
    limit = limits.user_locals if frame["user"] else limits.library_locals
    rows, total = summarize_locals(
        items,
        limit=limit,
        prefer=prefer,
        namespace=namespace,
        hidden=hidden if namespace else None,
        cls=cls,
        live=live,
        budget=budget,
    )
    frame["locals"] = rows
    frame["locals_total"] = total
    frame["locals_truncated"] = total > len(rows)
    if namespace:
        frame["namespace"] = True  # module level: the notebook's globals
    del items
