"""A DataLoader's dataset error, unwrapped: the original exception, its frames, the sample.

With ``num_workers > 0`` torch re-raises a worker's error in the main process through
``torch._utils.ExceptionWrapper.reraise``: a new exception of the same type (or a
``RuntimeError`` when that type cannot be built from one string) whose message is
"Caught ValueError in DataLoader worker process 0.\\nOriginal Traceback (most recent call
last): ..." — the worker's whole formatted traceback as text. ``unwrap`` finds that
wrapper (the ``self`` of the innermost ``reraise`` frame; else the message's own
"Caught ... in DataLoader worker process N." head) and parses the text back into the
original type, message and frames (``parse_traceback``: bounded, R09; any line it does
not recognise ends the parse with what it has, R20). The frames' file names and lines
are the worker's, on this machine: they get the same rows as live frames (origin, cell,
source), without locals (``process`` names where they ran).

Which sample failed is known only when the worker noted it on the wrapper
(ranks/worker/loader_errors.py, in worker processes of ours); otherwise ``index_known`` is
false with the reason. With ``num_workers=0`` the dataset's frames are live in the
kernel: the same reader finds the index there.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from ....ranks.worker.loader_errors import ORIGIN_ATTR, read
from ..cells import CellMap
from ..summarize import safe_text
from .bounds import Limits
from .frame import location_row
from .stack import StackEntry

if TYPE_CHECKING:
    from ....protocol import messages as m
    from ....protocol.json_types import JsonValue

#: Characters / lines of a wrapped traceback's text parsed at most.
MAX_TEXT = 200_000
MAX_LINES = 4_000
#: Keys of the worker's note kept (each checked for its type).
_ORIGIN_KEYS = ("index", "index_known", "batch", "batch_size", "dataset", "iterable")

_HEAD = re.compile(
    r"Caught (?P<type>[A-Za-z_][\w.]*) (?P<where>in DataLoader worker process (?P<id>\d+))\."
    r"\r?\n(?:Original )?(?P<tb>Traceback \(most recent call last\):.*)",
    re.DOTALL,
)
_TB_START = "Traceback (most recent call last):"
_FILE = re.compile(r'  File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.*))?')
_CARETS = re.compile(r"\s*[\^~]+[\s\^~]*")
_REPEATED = re.compile(r"  \[Previous line repeated (\d+) more times?\]")
_EXC_LINE = re.compile(r"(?P<type>[A-Za-z_][\w.]*)(?::(?: (?P<msg>.*))?)?")
_UTILS_FILE = os.path.join("torch", "_utils.py")


@dataclass
class TextFrame:
    """One frame of a traceback known only as text."""

    file: str
    lineno: int
    function: str
    line: str
    #: "[Previous line repeated N more times]" after it (recursion, collapsed by Python).
    repeated: int = 0


@dataclass
class Parsed:
    """A formatted traceback read back: frames (outermost first), the exception."""

    frames: list[TextFrame]
    type: str
    message: str
    #: Frames dropped (beyond ``Limits.frames``: the outermost go).
    cut: int = 0


@dataclass
class LoaderError:
    """A dataset error as the DataLoader raised it, unwrapped."""

    #: "DataLoader worker process 1", or "the main process" (``num_workers=0``).
    where: str
    worker_id: int | None
    pid: int | None
    #: The original exception: type, module, message, message_truncated.
    original: m.ExceptionInfo
    #: The worker's frames from the wrapped text (empty in the main process).
    parsed: Parsed | None
    #: What the worker (or the live frames) showed of the sample; None when unknown.
    origin: dict[str, object] | None
    why_unknown: str | None = None
    frame_rows: list[dict[str, object]] = field(default_factory=list)

    @property
    def in_worker(self) -> bool:
        return self.parsed is not None

    def to_json(self, frame: int | None) -> dict[str, object]:
        """The ``unwrapped`` part of the exception message (``frame``: the dataset's
        frame in ``frames``)."""
        o = self.origin or {}
        return {
            "where": self.where,
            "worker_id": self.worker_id,
            "pid": self.pid,
            "exception": self.original,
            "index_known": bool(o.get("index_known")),
            "index": o.get("index") if o.get("index_known") else None,
            "batch": o.get("batch"),
            "batch_size": o.get("batch_size"),
            "dataset": o.get("dataset"),
            "frame": frame,
            "why_unknown": self.why_unknown,
        }


def unwrap(exc: BaseException, entries: list[StackEntry], limits: Limits) -> LoaderError | None:
    """The DataLoader error behind ``exc``, or None when it is not one. Never raises."""
    try:
        wrapped = _from_wrapper(entries, limits)
        if wrapped is None:
            wrapped = _from_message(exc, limits)
        if wrapped is not None:
            return wrapped
        return _in_main_process(exc, limits)
    except Exception:
        return None


def _from_wrapper(entries: list[StackEntry], limits: Limits) -> LoaderError | None:
    """The ``self`` of torch's ``ExceptionWrapper.reraise`` (the innermost frame)."""
    if not entries:
        return None
    last = entries[-1]
    code = last.tb.tb_frame.f_code
    if code.co_name != "reraise" or not code.co_filename.endswith(_UTILS_FILE):
        return None
    wrapper = last.tb.tb_frame.f_locals.get("self")
    cls = type(wrapper)
    if cls.__name__ != "ExceptionWrapper" or cls.__module__ != "torch._utils":
        return None
    state = object.__getattribute__(wrapper, "__dict__")
    text, where = state.get("exc_msg"), state.get("where")
    if type(text) is not str or type(where) is not str:
        return None
    m = re.fullmatch(r"in DataLoader worker process (\d+)", where)
    if m is None:
        return None  # a pin-memory thread's or another wrapper's: not a dataset's
    parsed = parse_traceback(text, limits)
    if parsed is None:
        return None
    tp = state.get("exc_type")
    module, name = _type_of(tp, parsed.type)
    origin = _origin(state.get(ORIGIN_ATTR))
    return _loader_error(
        f"DataLoader worker process {m.group(1)}",
        int(m.group(1)),
        parsed,
        module,
        name,
        origin,
        limits,
    )


def _from_message(exc: BaseException, limits: Limits) -> LoaderError | None:
    """Without the wrapper (re-raised by other code): the message's own head."""
    try:
        # BaseException's own descriptor: a subclass's `args` property never runs (R54)
        args = BaseException.__dict__["args"].__get__(exc)
        text = args[0] if type(args) is tuple and args else None
    except Exception:
        return None
    if type(text) is not str:
        return None
    m = _HEAD.match(text[:MAX_TEXT])
    if m is None:
        return None
    parsed = parse_traceback(m.group("tb"), limits)
    if parsed is None:
        return None
    module, name = _split_type(parsed.type)
    return _loader_error(
        m.group("where")[3:], int(m.group("id")), parsed, module, name, None, limits
    )


def _loader_error(
    where: str,
    worker_id: int,
    parsed: Parsed,
    module: str,
    name: str,
    origin: dict[str, object] | None,
    limits: Limits,
) -> LoaderError:
    message, cut = safe_text(parsed.message, limits.message_chars)
    original: m.ExceptionInfo = {
        "type": name,
        "module": module,
        "message": message,
        "message_truncated": cut,
    }
    why = None
    if origin is None:
        why = (
            "the worker sent only its traceback text (it was not started while the "
            "extension was loaded in this kernel)"
        )
    elif not origin.get("index_known"):
        why = _why_not(origin)
    pid = origin.pop("pid", None) if origin is not None else None  # an int or None (_origin)
    pid = pid if isinstance(pid, int) else None
    if origin is not None:
        origin.pop("worker_id", None)  # the wrapper's own "where" says it
    return LoaderError(where, worker_id, pid, original, parsed, origin, why)


def _in_main_process(exc: BaseException, limits: Limits) -> LoaderError | None:
    """``num_workers=0``: the dataset's frames are on the raised exception's traceback."""
    tb: TracebackType | None = BaseException.__dict__["__traceback__"].__get__(exc)
    found = read(tb)
    del tb
    if found is None:
        return None
    from .exception import exception_summary

    origin = _origin(found)
    if origin is not None:
        origin.pop("worker_id", None)
        origin.pop("pid", None)
    why = None if origin is None or origin.get("index_known") else _why_not(origin or {})
    return LoaderError(
        "the main process",
        None,
        None,
        exception_summary(exc, limits.message_chars),
        None,
        origin,
        why,
    )


def _why_not(origin: dict[str, object]) -> str:
    if origin.get("iterable"):
        return "an IterableDataset has no index: its samples come from an iterator"
    if origin.get("batch") is not None:
        return (
            "the error was not raised inside the dataset's __getitem__ (in collate_fn or "
            "__getitems__): the whole batch is given"
        )
    return "the dataset's __getitem__ was not on the traceback"


def _origin(raw: object) -> dict[str, object] | None:
    """The worker's note, kept only in the shape it is written in (it crossed a pickle)."""
    if type(raw) is not dict:
        return None
    out: dict[str, object] = {}
    for key in _ORIGIN_KEYS:
        out[key] = _plain(raw.get(key))
    out["index_known"] = out["index_known"] is True
    out["iterable"] = out["iterable"] is True
    if type(out["batch_size"]) is not int:
        out["batch_size"] = None
    if type(out["batch"]) is not list:
        out["batch"] = None
    if type(out["dataset"]) is not str:
        out["dataset"] = None
    for key in ("worker_id", "pid"):
        v = raw.get(key)
        out[key] = v if type(v) is int else None
    return out


def _plain(v: object, depth: int = 0) -> JsonValue:
    """JSON values of the note (ints, bools, short strings, small lists, ``{"type"}``)."""
    if v is None or type(v) is bool or type(v) is int:
        return v
    if type(v) is str:
        return safe_text(v, 200)[0]
    if type(v) is list and depth < 2:
        return [_plain(x, depth + 1) for x in v[:64]]
    if type(v) is dict and set(v) == {"type"}:
        return {"type": _plain(v.get("type"), 2)}
    return None


def _type_of(tp: object, fallback: str) -> tuple[str, str]:
    """(module, name) of the original exception class, read from the class itself."""
    if isinstance(tp, type):
        try:
            name, module = tp.__qualname__, tp.__module__
            if isinstance(name, str) and isinstance(module, str):
                return module, name
        except Exception:
            pass
    return _split_type(fallback)


def _split_type(text: str) -> tuple[str, str]:
    """``pkg.mod.Error`` -> ("pkg.mod", "Error"); ``ValueError`` -> ("builtins", ...)."""
    module, dot, name = text.rpartition(".")
    return (module, name) if dot else ("builtins", text)


def parse_traceback(text: str, limits: Limits) -> Parsed | None:
    """Read a ``traceback.format_exception`` text back: the last "Traceback (most recent
    call last):" block (the raised exception; earlier blocks are its causes), its frames
    and the exception line with the message lines after it. None when no frame and no
    exception line can be read. Bounded by ``MAX_TEXT``, ``MAX_LINES`` and
    ``limits.frames`` (the innermost frames are kept)."""
    lines = text[:MAX_TEXT].splitlines()[:MAX_LINES]
    start = max((i for i, ln in enumerate(lines) if ln.endswith(_TB_START)), default=None)
    if start is None:
        return None
    frames: list[TextFrame] = []
    i = start + 1
    while i < len(lines):
        ln = lines[i]
        m = _FILE.fullmatch(ln)
        if m is not None:
            code = ""
            if i + 1 < len(lines) and lines[i + 1].startswith("    "):
                code = lines[i + 1].strip()
                i += 1
                while i + 1 < len(lines) and _CARETS.fullmatch(lines[i + 1]):
                    i += 1
            frames.append(
                TextFrame(m.group("file"), int(m.group("line")), m.group("func") or "?", code)
            )
            i += 1
            continue
        rep = _REPEATED.fullmatch(ln)
        if rep is not None and frames:
            frames[-1].repeated += int(rep.group(1))
            i += 1
            continue
        if _CARETS.fullmatch(ln):
            i += 1
            continue
        break
    if i >= len(lines):
        return None
    head = _EXC_LINE.fullmatch(lines[i])
    if head is None:
        return None
    message = "\n".join([head.group("msg") or "", *lines[i + 1 :]]).strip("\n")
    cut = max(0, len(frames) - limits.frames)
    return Parsed(frames[cut:], head.group("type"), message, cut)


def frame_rows(
    loader: LoaderError, first_pos: int, cells: CellMap | None, limits: Limits
) -> list[dict[str, object]]:
    """Rows for the worker's frames (positions from ``first_pos``), marked with the
    process they ran in; no locals (that process's frames are gone)."""
    rows: list[dict[str, object]] = []
    parsed = loader.parsed
    if parsed is None:
        return rows
    for k, tf in enumerate(parsed.frames):
        row = location_row(
            tf.file, tf.lineno, tf.function, first_pos + parsed.cut + k, cells, limits
        )
        if tf.line:
            row["line"] = safe_text(tf.line, limits.line_chars)[0]  # what the worker ran
        row.update(locals=[], locals_total=0, locals_truncated=False, process=loader.where)
        rows.append(row)
    return rows


def dataset_frame(frames: list[dict[str, object]], start: int) -> int | None:
    """Index of the frame where the dataset was entered (the first ``__getitem__`` /
    ``__getitems__`` after torch's fetcher), from ``start`` on; else the innermost."""
    for i in range(start, len(frames)):
        if frames[i].get("function") in ("__getitem__", "__getitems__"):
            return i
    return len(frames) - 1 if start < len(frames) else None
