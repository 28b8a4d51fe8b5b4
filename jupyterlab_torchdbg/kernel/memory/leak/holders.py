"""The holders of a leak: two namespace scans (scan.py) compared over the steps between.

A graph whose node count grows with the steps holds about ``nodes / (new nodes per
step)`` steps of graph; a container (or a closure's / hook's tensors) whose tensor count
grows by about one per step keeps one tensor a step. What holds the same between two
scans (a cache that stopped growing, a model's output kept once) is not a holder, nor is a
bounded cache (``deque(maxlen=N)``) filling up when, full, it fits in what is left below
the limit: its growth stops at the bound (``filling`` says so, and the alert waits).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .scan import Seen
from .text import CONTAINER_FIX, GRAPH_FIX, HOOK_FIX, holder_text, size

if TYPE_CHECKING:
    from ....protocol.messages import LeakHolder

MAX_HOLDERS = 10
#: New tensors per step (or graph nodes per step) below this are not growth.
MIN_RATE = 0.2


def _to_fill(now: Seen) -> int | None:
    """Bytes a bounded container still takes on until it is full (None: not bounded)."""
    if now.bound is None or now.entries <= 0:
        return None
    return max(0, now.bound - now.entries) * (now.bytes or 0) // now.entries


def _cache(now: Seen, room: float | None) -> bool:
    """A bounded container that, full, fits in ``room`` (bytes left below the limit;
    None: unknown): a cache, not a leak."""
    more = _to_fill(now)
    return more is not None and (room is None or more <= room)


def filling(
    before: dict[str, Seen], after: dict[str, Seen], steps: int, room: float | None
) -> list[str]:
    """The bounded caches that grew between the two scans (each a sentence): the growth
    seen may be theirs, also when one filled up in between (the next search tells)."""
    out = []
    for name, now in after.items():
        was = before.get(name)
        if steps <= 0 or was is None or was.kind != now.kind or not _cache(now, room):
            continue
        if (now.count - was.count) / steps < MIN_RATE:
            continue
        if now.entries < (now.bound or 0):
            full = (now.bytes or 0) + (_to_fill(now) or 0)
            out.append(
                f"`{name}` is a bounded deque filling up ({now.entries:,} of {now.bound:,} "
                f"entries, {size(now.bytes)}; about {size(full)} full): its growth stops there"
            )
        else:
            out.append(
                f"`{name}` is a bounded deque that filled up ({now.bound:,} entries, "
                f"{size(now.bytes)}): the next search tells whether memory still grows"
            )
    return out


def compare(
    before: dict[str, Seen],
    after: dict[str, Seen],
    steps: int,
    per_step: float | None,
    room: float | None = None,
) -> list[LeakHolder]:
    """Holders growing between two scans ``steps`` steps apart, biggest first (``room``:
    bytes left below the limit, for the bounded caches)."""
    if steps <= 0:
        return []
    out: list[tuple[float, LeakHolder]] = []
    for name, now in after.items():
        was = before.get(name)
        if was is None or was.kind != now.kind or _cache(now, room):
            continue
        rate = (now.count - was.count) / steps
        if rate < MIN_RATE:
            continue
        if now.kind == "graph":
            held = max(1, round(now.count / rate))
            nbytes = int(per_step * held) if per_step and per_step > 0 else None
            bound = "at least " if now.capped else "about "
            text = (
                f"`{name}` holds the autograd graph of {bound}{held:,} steps "
                f"({now.count:,} autograd nodes, {rate:.0f} more per step)"
            )
            if nbytes:
                text += f", about {size(nbytes)} at the current rate"
            h: LeakHolder = {
                "name": name,
                "kind": "graph",
                "bytes": nbytes,
                "count": held,
                "text": text,
                "fix": GRAPH_FIX,
            }
            out.append((float(nbytes or 0) + 1e15, h))  # a growing graph first
            continue
        fix = CONTAINER_FIX if now.kind == "container" else HOOK_FIX
        text = holder_text(now.kind, name, now.count, now.bytes, rate, now.graphs)
        h = {
            "name": name,
            "kind": now.kind,
            "bytes": now.bytes,
            "count": now.count,
            "text": text,
            "fix": fix,
        }
        out.append((float(now.bytes or 0), h))
    out.sort(key=lambda p: -p[0])
    return [h for _, h in out[:MAX_HOLDERS]]
