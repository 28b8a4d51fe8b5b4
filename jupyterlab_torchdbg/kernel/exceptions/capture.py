"""Turn a failed cell's exception into an ``exception`` message: strings, never frames.

The capture runs inside ``post_run_cell``, after IPython has shown the traceback and set
``sys.last_value``/``sys.last_traceback``; it only reads. It walks the traceback once,
elides long recursions (R09), marks cell / user-file / library frames, summarises each
kept frame's locals (metadata only, R21) and asks the classifier for a diagnosis. While
it runs, the live objects of the summarised locals sit in one local dict so the
classifier can resolve identities (the ``input`` of ``Linear.forward`` is the user's
``x``); that dict and every frame reference are dropped before it returns, so the tool
never keeps a tensor or a frame alive (R23). Only ``sys.last_traceback`` (IPython's, used
by ``%debug``) does.

Anything that fails while summarising degrades to ``"n/a"`` (R17, R20); the size of the
whole message is bounded (R09).
"""

from __future__ import annotations

import builtins
import functools
import gc
import itertools
import json
import linecache
import os
import re
import site
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType, FrameType, TracebackType
from typing import Any

from ...protocol import jsonable
from .cells import CellMap
from .diagnose import Context, diagnose
from .summarize import (
    NA,
    TENSOR,
    Classifier,
    safe_text,
    strip_private,
    summarize_locals,
    type_name,
)

_BaseExceptionGroup: Any = getattr(builtins, "BaseExceptionGroup", None)


@dataclass(frozen=True)
class Limits:
    """Every bound of one exception message (R09)."""

    #: Traceback entries walked at most (a deeper stack is counted as truncated).
    walk: int = 200_000
    #: Frames sent at most; the rest are elided (outermost ``head`` + innermost).
    frames: int = 40
    head: int = 8
    #: Identical consecutive frames kept before a run is elided (as Python's traceback).
    repeats: int = 3
    #: Locals rows per user frame / per library frame.
    user_locals: int = 50
    library_locals: int = 12
    #: Source lines shown either side of a frame's line.
    context: int = 2
    line_chars: int = 300
    message_chars: int = 10_000
    chain: int = 8
    chain_message_chars: int = 2_000
    group: int = 20
    group_depth: int = 5
    #: The serialised message is kept under this many bytes (a comm message limit is far
    #: above; the panel stays responsive).
    max_bytes: int = 1_000_000


LIMITS = Limits()


@dataclass
class _Entry:
    tb: TracebackType
    key: tuple[str, int, str]


@dataclass
class _State:
    """What one capture holds while it runs; dropped when it returns."""

    live: dict[int, Any] = field(default_factory=dict)
    frames_live: list[FrameType] = field(default_factory=list)


def capture(
    exc: BaseException,
    *,
    shell: Any = None,
    cells: CellMap | None = None,
    limits: Limits = LIMITS,
) -> dict[str, Any]:
    """The body of an ``exception`` message for ``exc`` (without id, time, replay).

    Never raises for a broken exception or broken locals; an unexpected internal error
    propagates to the caller, which counts it.
    """
    state = _State()
    # The capture makes many short-lived objects; a full collection of a big training
    # heap in the middle of it would cost ~100 ms, so the collector waits until it ends.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _capture(exc, shell, cells, limits, state)
    finally:
        state.live.clear()
        state.frames_live.clear()
        if was_enabled:
            gc.enable()


def _capture(
    exc: BaseException,
    shell: Any,
    cells: CellMap | None,
    limits: Limits,
    state: _State,
) -> dict[str, Any]:
    cls = Classifier()
    head = exception_summary(exc, limits.message_chars)
    msg: dict[str, Any] = {"exception": head}
    truncated = bool(head.get("message_truncated"))

    syntax = _syntax(exc, cells, limits)
    if syntax is not None:
        msg["exception"]["syntax"] = syntax

    entries, walked_all = _walk(exc.__traceback__, limits.walk)
    entries = _skip_ipython_prefix(entries)
    kept, elided = _elide(entries, limits)
    truncated = truncated or not walked_all or bool(elided)

    hidden = getattr(shell, "user_ns_hidden", None)
    frames: list[dict[str, Any]] = []
    mentioned: list[str] = []
    for pos in kept:
        entry = entries[pos]
        frame = _frame(entry.tb, pos, cells, limits)
        frames.append(frame)
        state.frames_live.append(entry.tb.tb_frame)
    focus = next((i for i in range(len(frames) - 1, -1, -1) if frames[i]["user"]), None)
    for i, frame in enumerate(frames):
        f = state.frames_live[i]
        prefer: list[str] = []
        if frame["user"]:
            prefer = frame.pop("_names", [])
            if i == focus:
                mentioned = prefer
        else:
            frame.pop("_names", None)
        _add_locals(frame, f, prefer, hidden, cls, state, limits)
    for e in elided:
        e["after"] = kept.index(e["after_pos"])
        del e["after_pos"]

    chain = _chain(exc, cells, limits)
    group = _group(exc, cells, limits)

    ctx = Context(
        exc_type=head["type"],
        exc_module=head["module"],
        message=head["message"],
        frames=frames,
        focus=focus,
        mentioned=mentioned,
        resolve=state.live.get,
        scan_tensors=lambda device: _scan_tensors(frames, state, cls, device),
        others=[(c["type"], c["message"]) for c in chain]
        + [(g["type"], g["message"]) for g in group],
    )
    diagnosis = diagnose(ctx)

    msg.update(
        diagnosis=diagnosis,
        frames=frames,
        focus=focus,
        frames_total=len(entries),
        elided=elided,
        chain=chain,
    )
    if group:
        msg["group"] = group
    msg["truncated"] = truncated
    state.live.clear()
    state.frames_live.clear()
    clean = jsonable(strip_private(msg))
    return _bound(clean, limits)


# --- the exception itself --------------------------------------------------------------


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


def _syntax(exc: BaseException, cells: CellMap | None, limits: Limits) -> dict[str, Any] | None:
    if not isinstance(exc, SyntaxError):
        return None

    # SyntaxError's fields are plain attributes set by the parser; a subclass could make
    # them properties, hence one guarded read each and exact-type checks.
    def read(name: str) -> Any:
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
        origin = "cell" if run is not None else _origin(filename, cells)
        out["file"] = _display_file(filename, origin, run)
        out["origin"] = origin
        if run is not None:
            out["cell_id"] = run.cell_id
            out["execution_count"] = run.execution_count
    return out


# --- walking and eliding the stack ---------------------------------------------------------


def _walk(tb: TracebackType | None, cap: int) -> tuple[list[_Entry], bool]:
    out: list[_Entry] = []
    while tb is not None:
        if len(out) >= cap:
            return out, False
        code = tb.tb_frame.f_code
        out.append(_Entry(tb, (code.co_filename, tb.tb_lineno or 0, code.co_name)))
        tb = tb.tb_next
    return out, True


def _ipython_shell_file() -> str | None:
    mod = sys.modules.get("IPython.core.interactiveshell")
    f = getattr(mod, "__file__", None)
    return f if isinstance(f, str) else None


def _skip_ipython_prefix(entries: list[_Entry]) -> list[_Entry]:
    """Drop IPython's own ``run_code`` frame(s) at the top, as its traceback does."""
    shell_file = _ipython_shell_file()
    i = 0
    while i < len(entries) - 1 and shell_file and entries[i].key[0] == shell_file:
        i += 1
    return entries[i:] if i else entries


def _elide(entries: list[_Entry], limits: Limits) -> tuple[list[int], list[dict[str, Any]]]:
    """Positions of frames to send and the gaps between them.

    Runs of an identical frame (same file, line, function: plain recursion) keep their
    first ``repeats``; if more than ``frames`` remain, the outermost ``head`` and the
    innermost rest are kept. Each gap is ``{after_pos, count, reason}``.
    """
    n = len(entries)
    kept: list[int] = []
    i = 0
    while i < n:
        j = i
        while j + 1 < n and entries[j + 1].key == entries[i].key:
            j += 1
        kept.extend(range(i, min(j + 1, i + limits.repeats)))
        i = j + 1
    if n and kept[-1] != n - 1:
        kept.append(n - 1)  # the frame that raised is always shown (and is the focus)
    if len(kept) > limits.frames:
        tail = limits.frames - limits.head
        kept = kept[: limits.head] + kept[-tail:]
    elided: list[dict[str, Any]] = []
    for a, b in itertools.pairwise(kept):
        if b - a > 1:
            key = entries[a].key
            repeated = all(entries[k].key == key for k in range(a + 1, b))
            elided.append(
                {"after_pos": a, "count": b - a - 1, "reason": "repeated" if repeated else "limit"}
            )
    return kept, elided


# --- one frame ------------------------------------------------------------------------------


_LIB_CACHE: dict[str, bool] = {}


@functools.cache
def _library_prefixes() -> tuple[str, ...]:
    paths: set[str] = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            paths.add(sysconfig.get_paths()[key])
        except Exception:
            pass
    try:
        paths.update(site.getsitepackages())
    except Exception:
        pass
    try:
        paths.add(site.getusersitepackages())
    except Exception:
        pass
    paths.update({sys.prefix, sys.base_prefix, sys.exec_prefix})
    return tuple(os.path.join(os.path.abspath(p), "") for p in paths if p)


def _is_library(filename: str) -> bool:
    hit = _LIB_CACHE.get(filename)
    if hit is None:
        if filename.startswith("<"):  # <frozen runpy>, <string>
            hit = True
        else:
            hit = os.path.abspath(filename).startswith(_library_prefixes())
        if len(_LIB_CACHE) > 10_000:
            _LIB_CACHE.clear()
        _LIB_CACHE[filename] = hit
    return hit


def _origin(filename: str, cells: CellMap | None) -> str:
    if cells is not None and cells.is_cell_file(filename):
        return "cell"
    if filename.startswith("<ipython-input-"):
        return "cell"
    return "library" if _is_library(filename) else "file"


def _display_file(filename: str, origin: str, run: Any) -> str:
    """A short name that reveals no home directory (S6)."""
    if origin == "cell":
        count = getattr(run, "execution_count", None)
        return f"Cell In[{count}]" if count is not None else "Cell"
    if filename.startswith("<"):
        return safe_text(filename, 200)[0]
    path = os.path.abspath(filename)
    if origin == "library":
        best = ""
        for entry in sys.path:
            if not entry:
                continue
            e = os.path.join(os.path.abspath(entry), "")
            if path.startswith(e) and len(e) > len(best):
                best = e
        if best:
            return safe_text(path[len(best) :], 300)[0]
    rel = _relative_to_cwd(path)
    if rel is not None:
        return safe_text(rel, 300)[0]
    parts = path.split(os.sep)
    return safe_text(os.path.join("…", *parts[-3:]), 300)[0]


def _relative_to_cwd(path: str) -> str | None:
    try:
        cwd = os.path.join(os.getcwd(), "")
    except Exception:
        return None
    return path[len(cwd) :] if path.startswith(cwd) else None


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _frame(tb: TracebackType, pos: int, cells: CellMap | None, limits: Limits) -> dict[str, Any]:
    f = tb.tb_frame
    code = f.f_code
    filename = code.co_filename
    lineno = tb.tb_lineno or 0
    run = cells.lookup(filename) if cells is not None else None
    origin = "cell" if run is not None else _origin(filename, cells)
    out: dict[str, Any] = {
        "position": pos,
        "origin": origin,
        "user": origin != "library",
        "function": safe_text(code.co_name, 200)[0],
        "file": _display_file(filename, origin, run),
        "lineno": lineno,
    }
    if origin == "cell":
        out["cell_id"] = getattr(run, "cell_id", None)
        out["execution_count"] = getattr(run, "execution_count", None)
        out["source_changed"] = bool(run is not None and cells and cells.source_changed(run))
    elif origin == "file":
        rel = _relative_to_cwd(os.path.abspath(filename))
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
    span = _span(code, tb.tb_lasti, lineno)
    if span is not None:
        out["span"] = span
    if out["user"]:
        out["_names"] = _names_in(filename, span, lineno)
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


def _add_locals(
    frame: dict[str, Any],
    f: FrameType,
    prefer: list[str],
    hidden: Any,
    cls: Classifier,
    state: _State,
    limits: Limits,
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
        live=state.live,
    )
    frame["locals"] = rows
    frame["locals_total"] = total
    frame["locals_truncated"] = total > len(rows)
    if namespace:
        frame["namespace"] = True  # module level: the notebook's globals
    del items


def _scan_tensors(
    frames: list[dict[str, Any]], state: _State, cls: Classifier, device: str
) -> list[dict[str, Any]]:
    """Every tensor reachable by a name in a user frame on ``device`` ("cuda", "cpu"), by
    size: the OOM autopsy's "largest live tensors". Metadata only; runs only on OOM."""
    from .summarize import summarize

    found: dict[int, dict[str, Any]] = {}
    for i, f in enumerate(state.frames_live):
        if not frames[i]["user"]:
            continue
        try:
            ns = f.f_locals
            items = list(ns.items()) if type(ns) is dict else []
        except Exception:
            continue
        for name, value in items[:200_000]:
            if type(name) is not str or name.startswith("_") or cls.kind(value) != TENSOR:
                continue
            if id(value) in found:
                continue
            try:  # the device type first: only tensors on the failing device get a row
                if value.device.type != device:
                    continue
            except Exception:
                continue
            found[id(value)] = {"name": name, "frame": i, **summarize(value, cls)}
    rows = [r for r in found.values() if isinstance(r.get("nbytes"), int)]
    rows.sort(key=lambda r: -r["nbytes"])
    return rows[:10]


# --- chained exceptions and groups ---------------------------------------------------------


def _innermost(tb: TracebackType | None, cells: CellMap | None) -> dict[str, Any] | None:
    last = None
    for _ in range(200_000):
        if tb is None:
            break
        last, tb = tb, tb.tb_next
    if last is None:
        return None
    code = last.tb_frame.f_code
    run = cells.lookup(code.co_filename) if cells is not None else None
    origin = "cell" if run is not None else _origin(code.co_filename, cells)
    out = {
        "file": _display_file(code.co_filename, origin, run),
        "lineno": last.tb_lineno or 0,
        "function": safe_text(code.co_name, 200)[0],
    }
    if run is not None:
        out["cell_id"] = run.cell_id
    return out


def _chain(exc: BaseException, cells: CellMap | None, limits: Limits) -> list[dict[str, Any]]:
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
        where = _innermost(nxt.__traceback__, cells)
        if where is not None:
            item["where"] = where
        out.append(item)
        cur = nxt
    return out


def _group(exc: BaseException, cells: CellMap | None, limits: Limits) -> list[dict[str, Any]]:
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
            where = _innermost(getattr(sub, "__traceback__", None), cells)
            if where is not None:
                item["where"] = where
            out.append(item)

    try:
        visit(exc, [], 0)
    except Exception:
        pass
    return out


# --- size bound -------------------------------------------------------------------------------


def _size(msg: dict[str, Any]) -> int:
    return len(json.dumps(msg, ensure_ascii=False, allow_nan=False).encode("utf-8", "replace"))


def _bound(msg: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """Keep the message under ``max_bytes``: drop library locals, then source context,
    then user locals, then frames (R09). Marks ``truncated``."""
    steps: list[Callable[[dict[str, Any]], None]] = [
        lambda m: _drop_locals(m, user=False),
        _drop_source,
        lambda m: _drop_locals(m, user=True),
        _drop_frames,
    ]
    for step in steps:
        if _size(msg) <= limits.max_bytes:
            return msg
        step(msg)
        msg["truncated"] = True
    return msg


def _drop_locals(msg: dict[str, Any], *, user: bool) -> None:
    for f in msg.get("frames", []):
        if f.get("user") == user and f.get("locals"):
            f["locals"] = []
            f["locals_truncated"] = True


def _drop_source(msg: dict[str, Any]) -> None:
    for f in msg.get("frames", []):
        f.pop("source", None)


def _drop_frames(msg: dict[str, Any]) -> None:
    focus = msg.get("focus")
    frames = msg.get("frames", [])
    if focus is not None and 0 <= focus < len(frames):
        msg["frames"] = [frames[focus]]
        msg["focus"] = 0
    else:
        msg["frames"] = frames[-1:]
        msg["focus"] = None
    msg["elided"] = []
    msg["chain"] = msg.get("chain", [])[:1]
    msg.pop("group", None)
    d = msg.get("diagnosis")
    if isinstance(d, dict):
        # frame indices in the diagnosis no longer point at the right frames
        d["where"] = msg["focus"]
        for c in d.get("culprits", []):
            c.pop("frame", None)
