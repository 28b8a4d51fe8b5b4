"""``build``: the body of an ``oom`` message, and ``oom_facts``: whether an error is one.

Gathers the parsed message, the allocator's counters and ``memory_summary()`` text, the
breakdown and the largest live tensors, then the remedies; the result holds strings and
numbers only (R23).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ...oom_text import parse_oom
from ...safe_read import safe_text
from ...units import fmt_bytes
from .. import breakdown as bd
from ..sources import ALLOCATOR_FIELDS, MemorySource
from .live_tensors import largest_tensors
from .remedies import choose_remedies

if TYPE_CHECKING:
    from ....protocol import messages as m

#: ``memory_summary()`` text kept.
SUMMARY_CHARS = 30_000

MESSAGE_CHARS = 2_000


def oom_facts(exc: BaseException) -> dict[str, object] | None:
    """``parse_oom``'s facts when ``exc`` is an out-of-memory error, else None."""
    etype = type(exc).__name__
    try:
        text = str(exc)
    except Exception:
        text = ""  # a broken __str__ (R17): only the type can tell
    torch = sys.modules.get("torch")
    oom_t = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    facts = parse_oom(text if isinstance(text, str) else "", etype)
    if facts is None and isinstance(oom_t, type) and isinstance(exc, oom_t):
        facts = {"device": "cuda", "requested_bytes": None}
    return facts


def build(
    exc: BaseException,
    facts: Mapping[str, object],
    *,
    ns: dict[str, object] | None,
    allocator: MemorySource,
    found: bd.Found,
    rss: int | None,
    summary: Callable[[int], str | None] | None = None,
    own: Callable[[object], bool] | None = None,
) -> dict[str, object]:
    """The body of an ``oom`` message (without id/time/replay/cell fields).

    ``own``: with training on several threads, which parameters this thread may read the
    gradients of (R34); the others' gradients are left out of the breakdown and tensors.
    """
    t0 = time.perf_counter()
    kind, index, dev_key = _device(facts)
    allocator_state, allocator_reason = _allocator(allocator, kind, index, dev_key)
    allocated, reserved = _allocated_reserved(allocator_state, facts)

    b = bd.compute(
        found, allocated={dev_key: allocated} if kind == "cuda" else None, rss=rss, own=own
    )
    row: m.MemoryBreakdownRow = bd.device_row(b, dev_key) or {
        "device": dev_key,
        "parameters": 0,
        "gradients": 0,
        "optimizer_state": 0,
        "other": allocated,
        "total": allocated,
        "total_source": "allocated" if allocated is not None else None,
    }
    tb = exc.__traceback__
    try:
        tensors, n_tensors, tensor_bytes = largest_tensors(ns, tb, kind, index, own=own)
    finally:
        del tb
    requested = _int(facts.get("requested_bytes"))
    numbers: m.OomNumbers = {
        "device": dev_key,
        "requested": requested,
        "total": _int(facts.get("total_bytes")),
        "allocated": allocated,
        "reserved": reserved,
        "parameters": row.get("parameters"),
        "gradients": row.get("gradients"),
        "optimizer_state": row.get("optimizer_state"),
        "other": row.get("other"),
    }
    remedies = choose_remedies(numbers)

    text: str | None = None
    if kind == "cuda" and summary is not None and allocator_state is not None:
        text = summary(index or 0)
    head = f"Out of memory on {dev_key}"
    if requested is not None:
        head += f": tried to allocate {fmt_bytes(requested)}"
        free = _int(facts.get("free_bytes"))
        if free is not None:
            head += f" with {fmt_bytes(free)} free"
    head += f". {remedies[0]['title']}."
    if tensors:
        head += f" Largest live tensor: `{tensors[0]['name']}` ({fmt_bytes(tensors[0]['nbytes'])})."

    return {
        "exception": {"type": type(exc).__name__, "message": _message(exc)},
        "device": dev_key,
        "headline": head,
        "requested_bytes": requested,
        "message_facts": {k: facts.get(k) for k in MESSAGE_FACTS},
        "allocator": allocator_state,
        "allocator_reason": allocator_reason,
        "numbers": numbers,
        "breakdown": row,
        "models": b["models"],
        "optimizers": b["optimizers"],
        "tensors": tensors,
        "tensors_total": n_tensors,
        "tensors_bytes": tensor_bytes,
        "summary": text[:SUMMARY_CHARS] if text is not None else None,
        "summary_truncated": text is not None and len(text) > SUMMARY_CHARS,
        "remedies": remedies,
        "capture_ms": round((time.perf_counter() - t0) * 1000, 2),
    }


#: The byte counts of the error's own text that the message passes on.
MESSAGE_FACTS = (
    "total_bytes",
    "free_bytes",
    "allocated_bytes",
    "reserved_unallocated_bytes",
    "process_bytes",
)


def _device(facts: Mapping[str, object]) -> tuple[str, int | None, str]:
    """(kind, index, key) of the device the error names: ``cuda`` alone is ``cuda:0``."""
    device = str(facts.get("device") or "cuda")
    kind, _, idx = device.partition(":")
    index = int(idx) if idx.isdigit() else None
    key = device if kind == "cpu" or index is not None else f"{kind}:0"
    if kind == "cuda" and index is None:
        index = 0
    return kind, index, key


def _allocator(
    allocator: MemorySource, kind: str, index: int | None, dev_key: str
) -> tuple[dict[str, object] | None, str | None]:
    """The caching allocator's counters for the device, or None and why not."""
    if kind != "cuda":
        return None, "the CPU has no caching allocator"
    reading = allocator.read()
    d = reading.device(index or 0) if reading.available else None
    if d is None:
        return None, reading.reason or f"no allocator counters for {dev_key}"
    return {k: d.values.get(k) for k in ALLOCATOR_FIELDS}, None


def _allocated_reserved(
    state: Mapping[str, object] | None, facts: Mapping[str, object]
) -> tuple[int | None, int | None]:
    """Allocated and reserved bytes: the allocator's counters, else the error's text."""
    allocated = _int(state.get("allocated")) if state is not None else None
    reserved = _int(state.get("reserved")) if state is not None else None
    if allocated is None:
        allocated = _int(facts.get("allocated_bytes"))
    if reserved is None and allocated is not None:
        unalloc = _int(facts.get("reserved_unallocated_bytes"))
        reserved = allocated + unalloc if unalloc is not None else None
    return allocated, reserved


def _message(exc: BaseException) -> str:
    """The error's text, encodable (lone surrogates, R20) and bounded even after
    escaping; "n/a" when its ``__str__`` fails (R17)."""
    try:
        text = str(exc)
        if type(text) is not str:
            raise TypeError
        return safe_text(text, MESSAGE_CHARS)[0][:MESSAGE_CHARS]
    except Exception:
        return "n/a"


def _int(v: object) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
