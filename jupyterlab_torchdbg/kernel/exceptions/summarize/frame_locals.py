"""A frame's locals as table rows: the most useful first, bounded, capture-only keys
removed before sending.

Rows carry an ``_id`` (``id()`` of the value) while a capture runs, so the diagnosis can
tell that the ``input`` of a library frame is the user's ``x``; ``strip_private`` removes
it before sending. Summaries never hold a reference to the value.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from ...safe_read import MAX_NAME, NOT_READ, safe_text, type_name
from .budget import Budget
from .kinds import NAMESPACE_NOISE, OBJECT, RANK, Classifier
from .row import summarize


def summarize_locals(
    items: Iterable[tuple[object, object]],
    *,
    limit: int,
    prefer: Iterable[str] = (),
    namespace: bool = False,
    hidden: Container[str] | None = None,
    cls: Classifier | None = None,
    live: dict[int, object] | None = None,
    budget: Budget | None = None,
) -> tuple[list[dict[str, object]], int]:
    """Rows for at most ``limit`` locals, most useful first, and how many were eligible.

    ``prefer``: names on the failing line, kept first. ``namespace``: the frame is the
    notebook's global namespace, so IPython's own names (``In``, ``_3``, ``_i3``, names in
    ``hidden``), imports, functions and classes are left out. ``live`` collects the
    objects of kept rows by id for the diagnosis; the caller clears it. ``budget``: past
    its deadline (or for a type already found slow) a row says "not read (time budget)"
    and counts in ``budget.skipped`` (R54).
    """
    cls = cls or Classifier()
    hide: Container[str] = hidden if namespace and hidden is not None else ()
    ranked, total = _ranked(items, set(prefer), namespace, hide, cls)
    if len(ranked) > limit:
        import heapq

        # (rank, index) is unique, so tuples never compare the values themselves.
        ranked = heapq.nsmallest(limit, ranked)
    else:
        ranked.sort()
    rows = [_row(name, value, cls, live, budget) for _, _, name, value in ranked]
    return rows, total


def _ranked(
    items: Iterable[tuple[object, object]],
    preferred: set[str],
    namespace: bool,
    hide: Container[str],
    cls: Classifier,
) -> tuple[list[tuple[int, int, str, object]], int]:
    """(rank, position, name, value) of every eligible local, and how many there are:
    the names on the failing line first, then by kind (tensors and modules before
    numbers and strings)."""
    ranked: list[tuple[int, int, str, object]] = []
    total = 0
    # The hot loop of a capture (10,000 locals): type-keyed cache, no method calls.
    cache = cls._cache
    kind_of = cls.kind
    rank_of = RANK.get
    for i, (name, value) in enumerate(items):
        if type(name) is not str:
            continue
        kind = cache.get(type(value))
        if kind is None:
            try:
                kind = kind_of(value)
            except Exception:
                kind = OBJECT
        if namespace and name not in preferred:
            if name[:1] == "_" or name in hide or kind in NAMESPACE_NOISE:
                continue
        total += 1
        ranked.append((0 if name in preferred else rank_of(kind, 3), i, name, value))
    return ranked, total


def _row(
    name: str,
    value: object,
    cls: Classifier,
    live: dict[int, object] | None,
    budget: Budget | None,
) -> dict[str, object]:
    """One local's row: read once per object and capture (the budget keeps the rows it
    read), or "not read" for a type found slow or past the deadline (R54)."""
    tp = type(value)
    shown = safe_text(name, MAX_NAME)[0]
    known = budget.rows.get(id(value)) if budget is not None else None
    if known is None and budget is not None and not budget.allows(tp):
        budget.skipped += 1
        kind = cls._cache.get(tp, OBJECT)
        return {"name": shown, "kind": kind, "type": type_name(value), "text": NOT_READ}
    if known is not None:
        row = {"name": shown, **known}
    else:
        started = budget.clock() if budget is not None else 0.0
        summary = summarize(value, cls)
        row = {"name": shown, **summary}
        if budget is not None:
            budget.timed(tp, started)
            budget.rows[id(value)] = summary
    if live is not None and isinstance(row_id := row.get("_id"), int):
        live[row_id] = value
    return row


def strip_private(value: object) -> object:
    """Drop the capture-only keys (leading underscore) from nested rows."""
    if isinstance(value, dict):
        return {k: strip_private(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [strip_private(v) for v in value]
    return value
