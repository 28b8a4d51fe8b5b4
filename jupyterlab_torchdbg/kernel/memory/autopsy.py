"""OOM autopsy: what filled the memory when a cell died of ``OutOfMemoryError``.

Built in ``post_run_cell`` right after the failure, from
- the message (requested size, free/total, allocated/reserved; parsed by the exception
  classifier's ``parse_oom``, shared so both read the message the same way),
- the allocator's host-side counters and ``memory_summary()`` text at that moment,
- the breakdown (parameters / gradients / optimizer state / everything else),
- the largest live tensors on the failing device with the names that reach them: the
  notebook's namespace, then every frame of the failing traceback (metadata only),
and it chooses remedies from those numbers. R23: nothing here allocates device memory or
synchronises (only storage sizes, shapes and addresses are read), and the result holds
strings and numbers only: the frames and tensors it looked at are dropped before it
returns.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from ..exceptions.diagnose.memory import fmt_bytes, parse_oom
from ..exceptions.summarize import safe_text
from . import breakdown as bd
from .sources import ALLOCATOR_FIELDS, MemorySource

#: Rows in the "largest live tensors" table.
MAX_TENSOR_ROWS = 15
#: Aliases listed per row.
MAX_ALIASES = 5
#: Traceback frames looked at.
MAX_FRAMES = 300
#: Names looked at per namespace/frame, and items per container.
MAX_NAMES = 200_000
MAX_ITEMS = 64
#: Parameters looked at per model.
MAX_PARAMS = 20_000
#: ``memory_summary()`` text kept.
SUMMARY_CHARS = 30_000
MESSAGE_CHARS = 2_000


def oom_facts(exc: BaseException) -> dict[str, Any] | None:
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


# --- the largest live tensors, by name ------------------------------------------------------


def _wants(device_type: str, index: int | None) -> Callable[[Any], bool]:
    def ok(t: Any) -> bool:
        d = t.device
        return bool(d.type == device_type and (index is None or d.index in (index, None)))

    return ok


def _candidates(
    ns: dict[str, Any] | None,
    tb: TracebackType | None,
    tensor_t: Any,
    module_t: Any,
    own: Callable[[Any], bool] | None = None,
) -> Iterator[tuple[str, str, str | None, int | None, str, Any]]:
    """(name, where, function, lineno, kind, tensor), namespace first, then the frames
    outermost first (the user's cell before the library internals). ``own``: whose
    ``.grad`` may be read from this thread (R34, see ``breakdown.compute``)."""

    def scan(
        items: list[tuple[Any, Any]], where: str, fn: str | None, line: int | None
    ) -> Iterator[tuple[str, str, str | None, int | None, str, Any]]:
        for name, v in items[:MAX_NAMES]:
            if not isinstance(name, str) or name.startswith("__"):
                continue
            if isinstance(v, tensor_t):
                yield name, where, fn, line, "variable", v
                g = _leaf_grad(v) if own is None or own(v) else None
                if g is not None:
                    yield f"{name}.grad", where, fn, line, "gradient", g
            # Containers one level deep, through the base types' own iterators: a
            # subclass's __iter__/__getitem__ is user code and is never called (R21).
            elif isinstance(v, (list, tuple)):
                items = list.__iter__(v) if isinstance(v, list) else tuple.__iter__(v)
                for i, x in enumerate(itertools.islice(items, MAX_ITEMS)):
                    if isinstance(x, tensor_t):
                        yield f"{name}[{i}]", where, fn, line, "element", x
            elif isinstance(v, dict):
                for k, x in itertools.islice(dict.items(v), MAX_ITEMS):
                    # Exact str/int keys only: never repr() a user object (R21).
                    if isinstance(x, tensor_t) and type(k) in (str, int):
                        yield f"{name}[{repr(k)[:60]}]", where, fn, line, "element", x
            elif module_t is not None and isinstance(v, module_t) and where == "namespace":
                try:
                    for n, (pname, p) in enumerate(v.named_parameters()):
                        if n >= MAX_PARAMS:
                            break
                        yield f"{name}.{pname}", where, fn, line, "parameter", p
                        g = p.grad if own is None or own(p) else None
                        if g is not None:
                            yield f"{name}.{pname}.grad", where, fn, line, "gradient", g
                except Exception:
                    continue

    if ns:
        yield from scan(list(ns.items()), "namespace", None, None)
    n = 0
    while tb is not None and n < MAX_FRAMES:
        f = tb.tb_frame
        n += 1
        try:
            local = f.f_locals
            if local is not ns and local is not f.f_globals:
                yield from scan(list(local.items()), "frame", f.f_code.co_name, tb.tb_lineno)
        except Exception:
            pass
        tb = tb.tb_next
    del tb


def _leaf_grad(t: Any) -> Any:
    """``t.grad`` of a leaf (a non-leaf's ``.grad`` warns and is never populated)."""
    try:
        return t.grad if t.is_leaf else None
    except Exception:
        return None


def largest_tensors(
    ns: dict[str, Any] | None,
    tb: TracebackType | None,
    device_type: str,
    index: int | None = None,
    limit: int = MAX_TENSOR_ROWS,
    own: Callable[[Any], bool] | None = None,
) -> tuple[list[dict[str, Any]], int, int]:
    """(rows, distinct storages, their bytes) for tensors on the device, largest first.

    A storage reached by several names is one row: the first name (namespace before
    frames), the rest in ``also``.
    """
    torch = sys.modules.get("torch")
    tensor_t = getattr(torch, "Tensor", None)
    module_t = getattr(getattr(torch, "nn", None), "Module", None)
    if tensor_t is None:
        return [], 0, 0
    wants = _wants(device_type, index)
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for name, where, fn, line, kind, t in _candidates(ns, tb, tensor_t, module_t, own):
        try:
            if not wants(t):
                continue
            s = t.untyped_storage()
            key = (str(t.device), int(s.data_ptr()))
            if key[1] == 0:
                continue
            row = rows.get(key)
            if row is not None:
                if name != row["name"] and name not in row["also"]:
                    row["also"].append(name)
                continue
            rows[key] = {
                "name": name,
                "also": [],
                "kind": kind,
                "where": where,
                "function": fn,
                "lineno": line,
                "shape": [int(x) for x in t.shape],
                "dtype": str(t.dtype).removeprefix("torch."),
                "device": str(t.device),
                "nbytes": int(s.nbytes()),
                "requires_grad": bool(t.requires_grad),
                # An output of autograd (grad_fn set) is usually an activation kept alive
                # for backward: the first suspect when activations dominate.
                "grad_fn": t.grad_fn is not None,
            }
        except Exception:
            continue
    ordered = sorted(rows.values(), key=lambda r: -r["nbytes"])
    total = sum(r["nbytes"] for r in ordered)
    for r in ordered:
        more = len(r["also"]) - MAX_ALIASES
        r["also"] = r["also"][:MAX_ALIASES] + ([f"+{more} more"] if more > 0 else [])
    return ordered[:limit], len(ordered), total


# --- remedies from the numbers ---------------------------------------------------------------


def _pct(part: int | None, whole: int | None) -> str:
    if not part or not whole:
        return "0%"
    return f"{100 * part / whole:.0f}%"


def choose_remedies(n: dict[str, Any]) -> list[dict[str, Any]]:
    """Remedies that fit the numbers, most fitting first.

    ``n``: device, requested, total, allocated, reserved, parameters, gradients,
    optimizer_state, other (bytes; any may be None). Order: one impossible allocation;
    fragmentation that alone explains the failure; then the categories by their share of
    the allocated memory (activations, optimizer state, kept gradients, weaker
    fragmentation); "release references" always last (it frees what the failure holds).
    """
    dev = str(n.get("device") or "cuda")
    requested, total = n.get("requested"), n.get("total")
    allocated, reserved = n.get("allocated"), n.get("reserved")
    params = n.get("parameters") or 0
    grads = n.get("gradients") or 0
    state = n.get("optimizer_state") or 0
    other = n.get("other")
    first: list[dict[str, Any]] = []
    ranked: list[tuple[float, dict[str, Any]]] = []

    if dev == "cpu":
        first.append(
            _remedy(
                "host_memory",
                "The process ran out of host memory",
                "Reduce the batch or the data held in memory, free large variables "
                "(`del x`), use fewer DataLoader workers, or stream the data from disk.",
                None,
                None,
            )
        )
    if requested and total and requested > total // 2:
        first.append(
            _remedy(
                "huge_allocation",
                f"One allocation of {fmt_bytes(requested)} is over half the device "
                f"({fmt_bytes(total)})",
                "Look for an unexpectedly large tensor before tuning anything: an accidental "
                "broadcast (`[N, 1] - [N]` gives `[N, N]`), an outer product or a full "
                "similarity matrix, a huge batch or sequence length.",
                None,
                requested / total,
            )
        )
    gap = reserved - allocated if reserved is not None and allocated is not None else None
    if gap is not None and gap > 0 and dev != "cpu":
        frag = _remedy(
            "fragmentation",
            f"{fmt_bytes(gap)} is reserved but unallocated (fragmentation)",
            "The cache holds free blocks too small or split for this request. Set "
            "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` before CUDA starts (restart "
            "the kernel; set it in the first cell, before importing torch). "
            "`torch.cuda.empty_cache()` returns cached blocks but cannot merge live ones.",
            "import os\nos.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:True'"
            "  # first cell, before torch",
            gap / reserved if reserved else None,
        )
        if requested and gap >= requested:
            first.append(frag)  # the memory is there, just not in one piece
        elif reserved and gap > 0.2 * reserved:
            ranked.append((gap / reserved, frag))
    if allocated:
        if other is not None and other >= 0.5 * allocated:
            ranked.append(
                (
                    other / allocated,
                    _remedy(
                        "activations",
                        f"Activations and data fill {fmt_bytes(other)} "
                        f"({_pct(other, allocated)} of {fmt_bytes(allocated)} allocated)",
                        "Halve the batch size (accumulate gradients to keep the effective "
                        "batch); run the forward pass under `torch.autocast` (bf16/fp16 "
                        "activations take half the memory); use activation checkpointing "
                        "(`torch.utils.checkpoint.checkpoint`) in deep models; evaluate "
                        "under `torch.no_grad()`.",
                        "with torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n"
                        "    loss = loss_fn(model(x), y)",
                        other / allocated,
                    ),
                )
            )
        if state >= 0.3 * allocated or (state >= 0.2 * allocated and state > params):
            ratio = f" — {state / params:.1f}x the parameters" if params else ""
            ranked.append(
                (
                    state / allocated,
                    _remedy(
                        "optimizer_state",
                        f"Optimizer state is {fmt_bytes(state)} ({_pct(state, allocated)}){ratio}",
                        "Adam/AdamW keep two fp32 tensors per parameter. SGD with momentum "
                        "keeps one and Adafactor factored ones; 8-bit optimizers keep their "
                        "states in 8 bits; or shard the state (ZeRO/FSDP) across GPUs.",
                        "optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)",
                        state / allocated,
                    ),
                )
            )
        if grads >= 0.15 * allocated:
            ranked.append(
                (
                    grads / allocated,
                    _remedy(
                        "gradients_kept",
                        f"Gradients hold {fmt_bytes(grads)} ({_pct(grads, allocated)}) "
                        "at the failure",
                        "Gradients from the last step are still allocated while the next "
                        "forward pass runs: free them right after the step with "
                        "`optimizer.zero_grad(set_to_none=True)` (and never keep a "
                        "reference to `p.grad`).",
                        "optimizer.step()\noptimizer.zero_grad(set_to_none=True)",
                        grads / allocated,
                    ),
                )
            )
    ranked.sort(key=lambda sr: -sr[0])
    out = first + [r for _, r in ranked]
    if not out:
        out.append(
            _remedy(
                "reduce_batch",
                "Reduce the memory of one step",
                "Halve the batch size (accumulate gradients over smaller batches), use "
                "`torch.autocast` for mixed precision, or activation checkpointing.",
                None,
                None,
            )
        )
    out.append(
        _remedy(
            "release_refs",
            "Free what the failed cell still holds",
            "The failed cell's traceback (kept for `%debug`) keeps its tensors alive: "
            "'Release references' frees them (and ends `%debug` on this error), then the "
            "cache is emptied.",
            None,
            None,
        )
    )
    return out


def _remedy(
    kind: str, title: str, detail: str, code: str | None, share: float | None
) -> dict[str, Any]:
    return {
        "kind": kind,
        "title": title,
        "detail": detail,
        "code": code,
        "share": None if share is None else round(min(max(share, 0.0), 1.0), 4),
    }


# --- the autopsy -------------------------------------------------------------------------------


def build(
    exc: BaseException,
    facts: dict[str, Any],
    *,
    ns: dict[str, Any] | None,
    allocator: MemorySource,
    found: bd.Found,
    rss: int | None,
    summary: Callable[[int], str | None] | None = None,
    own: Callable[[Any], bool] | None = None,
) -> dict[str, Any]:
    """The body of an ``oom`` message (without id/time/replay/cell fields).

    ``own``: with training on several threads, which parameters this thread may read the
    gradients of (R34); the others' gradients are left out of the breakdown and tensors.
    """
    t0 = time.perf_counter()
    device = str(facts.get("device") or "cuda")
    kind, _, idx = device.partition(":")
    index = int(idx) if idx.isdigit() else None
    dev_key = device if kind == "cpu" or index is not None else f"{kind}:0"
    if kind == "cuda" and index is None:
        index = 0
        device = dev_key

    allocator_state: dict[str, Any] | None = None
    allocator_reason: str | None = None
    if kind == "cuda":
        reading = allocator.read()
        d = reading.device(index or 0) if reading.available else None
        if d is not None:
            allocator_state = {k: d.values.get(k) for k in ALLOCATOR_FIELDS}
        else:
            allocator_reason = reading.reason or f"no allocator counters for {device}"
    else:
        allocator_reason = "the CPU has no caching allocator"

    allocated: int | None = None
    reserved: int | None = None
    if allocator_state is not None:
        allocated = _int(allocator_state.get("allocated"))
        reserved = _int(allocator_state.get("reserved"))
    if allocated is None:
        allocated = facts.get("allocated_bytes")
    if reserved is None and allocated is not None:
        unalloc = facts.get("reserved_unallocated_bytes")
        reserved = allocated + unalloc if unalloc is not None else None

    b = bd.compute(
        found, allocated={dev_key: allocated} if kind == "cuda" else None, rss=rss, own=own
    )
    row = bd.device_row(b, dev_key) or {
        "device": dev_key,
        **dict.fromkeys(bd.CATEGORIES, 0),
        "other": allocated,
        "total": allocated,
        "total_source": "allocated" if allocated is not None else None,
    }
    tb = exc.__traceback__
    try:
        tensors, n_tensors, tensor_bytes = largest_tensors(ns, tb, kind, index, own=own)
    finally:
        del tb
    numbers = {
        "device": dev_key,
        "requested": facts.get("requested_bytes"),
        "total": facts.get("total_bytes"),
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
    cut = text is not None and len(text) > SUMMARY_CHARS
    try:
        text_exc = str(exc)
        if type(text_exc) is not str:
            raise TypeError
        # Encodable (lone surrogates, R20) and bounded, even after escaping.
        message = safe_text(text_exc, MESSAGE_CHARS)[0][:MESSAGE_CHARS]
    except Exception:
        message = "n/a"  # a broken __str__ (R17)

    head = f"Out of memory on {dev_key}"
    requested = facts.get("requested_bytes")
    if requested is not None:
        head += f": tried to allocate {fmt_bytes(requested)}"
        if facts.get("free_bytes") is not None:
            head += f" with {fmt_bytes(facts['free_bytes'])} free"
    head += f". {remedies[0]['title']}."
    if tensors:
        head += f" Largest live tensor: `{tensors[0]['name']}` ({fmt_bytes(tensors[0]['nbytes'])})."

    return {
        "exception": {"type": type(exc).__name__, "message": message},
        "device": dev_key,
        "headline": head,
        "requested_bytes": requested,
        "message_facts": {
            k: facts.get(k)
            for k in (
                "total_bytes",
                "free_bytes",
                "allocated_bytes",
                "reserved_unallocated_bytes",
                "process_bytes",
            )
        },
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
        "summary_truncated": cut,
        "remedies": remedies,
        "capture_ms": round((time.perf_counter() - t0) * 1000, 2),
    }


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
