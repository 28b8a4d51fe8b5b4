"""The holders of a leak: two namespace scans (scan.py) compared over the steps between.

A graph whose node count grows with the steps holds about ``nodes / (new nodes per
step)`` steps of graph; a container (or a closure's / hook's tensors) whose tensor count
grows by about one per step keeps one tensor a step. What holds the same between two
scans (a bounded cache, a model's output kept once) is not a holder.
"""

from __future__ import annotations

from typing import Any

from .scan import Seen
from .text import CONTAINER_FIX, GRAPH_FIX, HOOK_FIX, holder_text, size

MAX_HOLDERS = 10
#: New tensors per step (or graph nodes per step) below this are not growth.
MIN_RATE = 0.2


def compare(
    before: dict[str, Seen], after: dict[str, Seen], steps: int, per_step: float | None
) -> list[dict[str, Any]]:
    """Holders growing between two scans ``steps`` steps apart, biggest first."""
    if steps <= 0:
        return []
    out: list[tuple[float, dict[str, Any]]] = []
    for name, now in after.items():
        was = before.get(name)
        if was is None or was.kind != now.kind:
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
            h = {"name": name, "kind": "graph", "bytes": nbytes, "count": held}
            h.update(text=text, fix=GRAPH_FIX)
            out.append((float(nbytes or 0) + 1e15, h))  # a growing graph first
            continue
        fix = CONTAINER_FIX if now.kind == "container" else HOOK_FIX
        text = holder_text(now.kind, name, now.count, now.bytes, rate, now.graphs)
        h = {"name": name, "kind": now.kind, "bytes": now.bytes, "count": now.count}
        h.update(text=text, fix=fix)
        out.append((float(now.bytes or 0), h))
    out.sort(key=lambda p: -p[0])
    return [h for _, h in out[:MAX_HOLDERS]]
