"""Remedies for an OOM, chosen from the autopsy's numbers (requested, free, reserved,
the breakdown's parameters / gradients / optimizer state / everything else).

Each remedy says what to change and why, with the numbers that led to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...units import fmt_bytes

if TYPE_CHECKING:
    from ....protocol import messages as m
    from ....protocol.messages import OomRemedyKind as RemedyKind


MEASURED = (
    " The next attempt's forward is measured: the Memory panel then shows which modules "
    "save the most for backward, per sample, and the batch that fits."
)


def _pct(part: int | None, whole: int | None) -> str:
    if not part or not whole:
        return "0%"
    return f"{100 * part / whole:.0f}%"


def choose_remedies(n: m.OomNumbers) -> list[m.OomRemedy]:
    """Remedies that fit the numbers, most fitting first.

    ``n``: device, requested, total, allocated, reserved, parameters, gradients,
    optimizer_state, other (bytes; any may be None). Order: one impossible allocation;
    fragmentation that alone explains the failure; then the categories by their share of
    the allocated memory (activations, optimizer state, kept gradients, weaker
    fragmentation); "release references" always last (it frees what the failure holds).
    """
    dev = str(n.get("device") or "cuda")
    # the monitor arms an activation measurement after a CUDA OOM (memory/activations)
    measured = "" if dev == "cpu" else MEASURED
    first = _decisive(n, dev)
    ranked = _by_share(n, measured)
    frag = _fragmentation(n) if dev != "cpu" else None
    if frag is not None:
        share, alone, remedy = frag
        if alone:
            first.append(remedy)
        elif share > 0.2:
            ranked.insert(0, (share, remedy))  # before the others at an equal share
    ranked.sort(key=lambda sr: -sr[0])
    out = first + [r for _, r in ranked]
    if not out:
        out.append(_reduce_batch(measured))
    out.append(_release_refs())
    return out


def _decisive(n: m.OomNumbers, dev: str) -> list[m.OomRemedy]:
    """What explains the failure whatever the breakdown: the host ran out, or one
    allocation wants over half the device."""
    out: list[m.OomRemedy] = []
    requested, total = n.get("requested"), n.get("total")
    if dev == "cpu":
        out.append(
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
        out.append(
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
    return out


def _fragmentation(n: m.OomNumbers) -> tuple[float, bool, m.OomRemedy] | None:
    """Reserved but unallocated bytes: (their share of the reserved bytes, whether they
    alone would have held the request, the remedy), or None when there are none."""
    allocated, reserved, requested = n.get("allocated"), n.get("reserved"), n.get("requested")
    if reserved is None or allocated is None or reserved - allocated <= 0:
        return None
    gap = reserved - allocated
    share = gap / reserved if reserved else None
    remedy = _remedy(
        "fragmentation",
        f"{fmt_bytes(gap)} is reserved but unallocated (fragmentation)",
        "The cache holds free blocks too small or split for this request. Set "
        "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` before CUDA starts (restart "
        "the kernel; set it in the first cell, before importing torch). "
        "`torch.cuda.empty_cache()` returns cached blocks but cannot merge live ones.",
        "import os\nos.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:True'"
        "  # first cell, before torch",
        share,
    )
    # the memory is there, just not in one piece
    return share or 0.0, bool(requested and gap >= requested), remedy


def _by_share(n: m.OomNumbers, measured: str) -> list[tuple[float, m.OomRemedy]]:
    """The categories of the allocated memory large enough to name, each with its share:
    activations and data, optimizer state, gradients kept into the next forward."""
    allocated = n.get("allocated")
    if not allocated:
        return []
    params = n.get("parameters") or 0
    grads = n.get("gradients") or 0
    state = n.get("optimizer_state") or 0
    other = n.get("other")
    ranked: list[tuple[float, m.OomRemedy]] = []
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
                    f"under `torch.no_grad()`.{measured}",
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
                    f"Gradients hold {fmt_bytes(grads)} ({_pct(grads, allocated)}) at the failure",
                    "Gradients from the last step are still allocated while the next "
                    "forward pass runs: free them right after the step with "
                    "`optimizer.zero_grad(set_to_none=True)` (and never keep a "
                    "reference to `p.grad`).",
                    "optimizer.step()\noptimizer.zero_grad(set_to_none=True)",
                    grads / allocated,
                ),
            )
        )
    return ranked


def _reduce_batch(measured: str) -> m.OomRemedy:
    """The general remedy when no number points anywhere."""
    return _remedy(
        "reduce_batch",
        "Reduce the memory of one step",
        "Halve the batch size (accumulate gradients over smaller batches), use "
        f"`torch.autocast` for mixed precision, or activation checkpointing.{measured}",
        None,
        None,
    )


def _release_refs() -> m.OomRemedy:
    """Always last: the failure itself holds memory."""
    return _remedy(
        "release_refs",
        "Free what the failed cell still holds",
        "The failed cell's traceback (kept for `%debug`) keeps its tensors alive: "
        "'Release references' frees them (and ends `%debug` on this error), then the "
        "cache is emptied.",
        None,
        None,
    )


def _remedy(
    kind: RemedyKind, title: str, detail: str, code: str | None, share: float | None
) -> m.OomRemedy:
    return {
        "kind": kind,
        "title": title,
        "detail": detail,
        "code": code,
        "share": None if share is None else round(min(max(share, 0.0), 1.0), 4),
    }
