"""``capture``: a failed cell's exception as the body of an ``exception`` message.

The capture runs inside ``post_run_cell``, after IPython has shown the traceback and set
``sys.last_value``/``sys.last_traceback``; it only reads. It walks the traceback once
(``stack``), marks cell / user-file / library frames (``origin``), builds each kept
frame's row with its locals summarised (metadata only, R21; ``frame``), adds the linked
exceptions (``linked``) and asks the classifier for a diagnosis. While it runs, the live
objects of the summarised locals sit in one ``CaptureState`` so the classifier can
resolve identities (the ``input`` of ``Linear.forward`` is the user's ``x``); that state
and every frame reference are dropped before it returns, so the tool never keeps a
tensor or a frame alive (R23). Only ``sys.last_traceback`` (IPython's, used by
``%debug``) does. The finished message is bounded in size (``bounds``, R09).

No user code runs without a bound (R54): summaries read metadata with subclass dispatch
off (``summarize.tensor_meta``, ``summarize.object_parts``), and one ``Budget`` per capture
(``summarize.budget``: ``CAPTURE_SECONDS`` in all) is checked between locals, before each
linked exception's message and before each live-object read of the diagnosis; past it
the rest is marked "not read (time budget)", live objects are no longer resolved and the
message is marked ``truncated``: what was read is sent.
"""

from __future__ import annotations

import gc
from collections.abc import Container
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING

from ....protocol import jsonable
from ..cells import CellMap
from ..diagnose import Context, diagnose, explain_loader_error
from ..summarize import TENSOR, Classifier, strip_private
from ..summarize.budget import Budget
from ..summarize.tensor_meta import read_meta
from .bounds import LIMITS, Limits, bound
from .exception import exception_summary, syntax_details
from .frame import add_locals, frame_row
from .linked import exception_chain, group_leaves
from .loader_error import LoaderError, dataset_frame, frame_rows, unwrap
from .stack import elide, skip_ipython_prefix, walk

if TYPE_CHECKING:
    from ....protocol import messages as m


@dataclass
class CaptureState:
    """What one capture holds while it runs; dropped when it returns."""

    live: dict[int, object] = field(default_factory=dict)
    frames_live: list[FrameType] = field(default_factory=list)
    budget: Budget = field(default_factory=Budget)


def capture(
    exc: BaseException,
    *,
    shell: object = None,
    cells: CellMap | None = None,
    limits: Limits = LIMITS,
    budget: Budget | None = None,
) -> dict[str, object]:
    """The body of an ``exception`` message for ``exc`` (without id, time, replay).

    Never raises for a broken exception or broken locals; an unexpected internal error
    propagates to the caller, which counts it. ``budget``: the capture's clock (a fresh
    ``Budget()`` by default, R54).
    """
    state = CaptureState()
    state.budget = budget if budget is not None else Budget()
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
    shell: object,
    cells: CellMap | None,
    limits: Limits,
    state: CaptureState,
) -> dict[str, object]:
    cls = Classifier()
    budget = state.budget
    head = exception_summary(exc, limits.message_chars, budget)
    msg: dict[str, object] = {"exception": head}
    truncated = bool(head.get("message_truncated"))

    syntax = syntax_details(exc, cells, limits)
    if syntax is not None:
        head["syntax"] = syntax  # (head is msg["exception"])

    traceback = BaseException.__dict__["__traceback__"].__get__(exc)  # no subclass property
    entries, walked_all = walk(traceback, limits.walk)
    del traceback
    entries = skip_ipython_prefix(entries)
    kept, gaps = elide(entries, limits)
    truncated = truncated or not walked_all or bool(gaps)

    frames: list[dict[str, object]] = []
    for pos in kept:
        entry = entries[pos]
        frames.append(frame_row(entry.tb, pos, cells, limits))
        state.frames_live.append(entry.tb.tb_frame)
    loader = unwrap(exc, entries, limits)
    worker_rows = frame_rows(loader, len(entries), cells, limits) if loader is not None else []
    shown = frames + worker_rows  # the worker's frames (if any) follow: it raised first
    focus = next((i for i in range(len(shown) - 1, -1, -1) if shown[i]["user"]), None)
    hidden = getattr(shell, "user_ns_hidden", None)
    mentioned = _add_locals(frames, focus, hidden, cls, state, limits)
    elided: list[m.ExceptionElidedItem] = [
        {"count": g["count"], "reason": g["reason"], "after": kept.index(g["after_pos"])}
        for g in gaps
    ]
    first_worker = len(frames)
    cut_worker, repeated_worker = _add_worker_frames(frames, worker_rows, loader, elided)
    truncated = truncated or bool(cut_worker or repeated_worker)
    if focus is not None and focus < len(frames) and frames[focus].get("process"):
        mentioned = []  # a frame of another process: no locals to name

    chain = exception_chain(exc, cells, limits, budget)
    group = group_leaves(exc, cells, limits, budget)

    original = loader.original if loader is not None else head
    ctx = Context(
        exc_type=original["type"],
        exc_module=original["module"],
        message=original["message"],
        frames=frames,
        focus=focus,
        mentioned=mentioned,
        # past the deadline the rules work from the summaries alone (R54)
        resolve=lambda obj_id: None if budget.expired() else state.live.get(obj_id),
        scan_tensors=lambda device: _scan_tensors(frames, state, cls, device),
        others=[(c["type"], c["message"]) for c in chain]
        + [(g["type"], g["message"]) for g in group],
    )
    diagnosis = diagnose(ctx)
    if loader is not None:
        start = first_worker if loader.in_worker else _fetch_frame(frames)
        at = dataset_frame(frames, start) if start is not None else None
        diagnosis = explain_loader_error(diagnosis, loader, frames, at)
        msg["unwrapped"] = loader.to_json(at)

    msg.update(
        diagnosis=diagnosis,
        frames=frames,
        focus=focus,
        frames_total=len(entries) + len(worker_rows) + cut_worker + repeated_worker,
        elided=elided,
        chain=chain,
    )
    if group:
        msg["group"] = group
    msg["truncated"] = truncated or budget.skipped > 0
    state.live.clear()
    state.frames_live.clear()
    clean = jsonable(strip_private(msg))
    return bound(clean, limits)


def _add_locals(
    frames: list[dict[str, object]],
    focus: int | None,
    hidden: Container[str] | None,
    cls: Classifier,
    state: CaptureState,
    limits: Limits,
) -> list[str]:
    """Each frame's locals, the identifiers its line names first (user frames); returns
    those of the focus frame (what the diagnosis may name)."""
    mentioned: list[str] = []
    for i, frame in enumerate(frames):
        prefer: list[str] = []
        if frame["user"]:
            names = frame.pop("_names", [])  # the identifiers frame_row found
            prefer = names if isinstance(names, list) else []
            if i == focus:
                mentioned = prefer
        else:
            frame.pop("_names", None)
        add_locals(
            frame, state.frames_live[i], prefer, hidden, cls, state.live, limits, state.budget
        )
    return mentioned


def _add_worker_frames(
    frames: list[dict[str, object]],
    worker_rows: list[dict[str, object]],
    loader: LoaderError | None,
    elided: list[m.ExceptionElidedItem],
) -> tuple[int, int]:
    """A DataLoader worker's frames after the main process's, with what its traceback
    left out as elided items; returns (frames beyond the limit, repeated frames)."""
    parsed = loader.parsed if loader is not None else None
    if parsed is None:
        return 0, 0
    if parsed.cut:  # the worker's outermost frames beyond the limit
        elided.append({"after": len(frames) - 1, "count": parsed.cut, "reason": "limit"})
    for k, tf in enumerate(parsed.frames):
        if tf.repeated:  # recursion Python's traceback already collapsed
            elided.append({"after": len(frames) + k, "count": tf.repeated, "reason": "repeated"})
    frames.extend(worker_rows)
    return parsed.cut, sum(tf.repeated for tf in parsed.frames)


def _fetch_frame(frames: list[dict[str, object]]) -> int | None:
    """The innermost frame of torch's dataset fetcher (the main process's own stack)."""
    for i in range(len(frames) - 1, -1, -1):
        if str(frames[i].get("file", "")).replace("\\", "/").endswith("data/_utils/fetch.py"):
            return i + 1
    return None


def _scan_tensors(
    frames: list[dict[str, object]], state: CaptureState, cls: Classifier, device: str
) -> list[dict[str, object]]:
    """Every tensor reachable by a name in a user frame on ``device`` ("cuda", "cpu"), by
    size: the OOM autopsy's "largest live tensors". Metadata only; runs only on OOM."""
    from ..summarize import summarize

    found: dict[int, dict[str, object]] = {}
    torch = cls.torch
    for i, f in enumerate(state.frames_live):
        if not frames[i]["user"] or torch is None or state.budget.expired():
            continue
        try:
            ns = f.f_locals
            items = list(ns.items()) if type(ns) is dict else []
        except Exception:
            continue
        for name, value in items[:200_000]:
            if state.budget.expired():
                break
            if type(name) is not str or name.startswith("_") or cls.kind(value) != TENSOR:
                continue
            if id(value) in found:
                continue
            # the device type first: only tensors on the failing device get a row
            if str(read_meta(value, torch, ("device",))["device"]).split(":")[0] != device:
                continue
            found[id(value)] = {"name": name, "frame": i, **summarize(value, cls)}
    sized = [(n, r) for r in found.values() if isinstance(n := r.get("nbytes"), int)]
    sized.sort(key=lambda nr: -nr[0])
    return [r for _, r in sized[:10]]
