"""How the leak reads: byte sizes, the headline, the holders' sentences and fixes."""

from __future__ import annotations

from ...units import short_bytes

GENERIC_FIX = (
    "Find what keeps a tensor (or its autograd graph) every step: keep numbers "
    "(`loss.item()`) or detached copies (`t.detach().cpu()`), and bound caches."
)
GRAPH_FIX = "accumulate `loss.item()` or `loss.detach()` (a number, not the tensor with its graph)"
CONTAINER_FIX = "keep `t.detach().cpu()` or a number (`t.item()`), or bound the container"
HOOK_FIX = "keep `t.detach().cpu()` (or a number) in the hook, and clear what it keeps"
SOURCES = {"cgroup": "cgroup limit", "host": "host memory", "device": "device total"}
COUNTERS = {"rss": "RSS", "allocated": "allocated", "reserved": "reserved"}


#: Sizes in sentences (``2.1 MiB``): the shared formatter.
size = short_bytes


def about(n: int) -> str:
    """A count rounded to two significant digits, with thousands separators."""
    if n < 100:
        return f"{n:,}"
    digits = len(str(n)) - 2
    return f"{round(n, -digits):,}"


def headline(
    *,
    counter: str,
    device: str | None,
    per_step: float,
    err: float,
    steps: int,
    used: float,
    limit: int | None,
    source: str | None,
    steps_left: int | None,
) -> str:
    what = COUNTERS.get(counter, counter) if device is None else f"{device} {counter}"
    out = f"{what} grows {size(per_step)} per step over the last {steps:,} steps (±{size(err)})"
    who = "the kernel" if device is None else device
    if limit is None:
        return out + "; no memory limit could be read"
    if steps_left is not None and steps_left <= 0:
        return out + f"; {who} is at its limit ({size(used)} of {size(limit)})"
    gib = 1 << 30
    of = f"{used / gib:.1f} of {limit / gib:.1f} GiB, {SOURCES.get(source or '', 'limit')}"
    return out + f"; at this rate {who} runs out in about {about(steps_left or 0)} steps ({of})"


def holder_text(
    kind: str, name: str, count: int, nbytes: int | None, rate: float, graphs: bool
) -> str:
    grow = f"growing by {rate:.0f} per step" if rate >= 1.5 else "growing by 1 per step"
    if rate < 0.75:
        grow = f"growing by 1 every {max(2, round(1 / max(rate, 1e-9))):,} steps"
    mem = f", {size(nbytes)}" if nbytes else ""
    kept = " (each keeps its autograd graph)" if graphs else ""
    if kind == "container":
        return f"`{name}`: {count:,} tensors{mem}, {grow}{kept}"
    return f"{name} keeps {count:,} tensors{mem}, {grow}{kept}"
