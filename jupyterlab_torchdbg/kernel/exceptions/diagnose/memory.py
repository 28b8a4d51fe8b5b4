"""Out of memory (CUDA, CPU, MPS) and sticky asynchronous CUDA errors (device-side assert).

Both work from the message and the captured metadata only: an OOM handler must not
allocate device memory (R23) and after a sticky CUDA error nothing may touch CUDA (R22).
"""

from __future__ import annotations

from typing import Any

from ...oom_text import parse_oom, sticky_cuda_error
from ...units import fmt_bytes
from .context import (
    LOSS_FUNCS,
    LOSS_TYPES,
    Context,
    Diagnosis,
    Row,
    as_culprit,
    frame_row,
    layer_label,
    library_args,
    library_frame,
    n_classes,
    user_name_or,
)

#: What helps with any out-of-memory error on an accelerator (the last one on the CPU too).
OOM_HINTS = [
    "Mixed precision halves activation memory: "
    "`with torch.autocast(device_type='cuda', dtype=torch.bfloat16): ...`",
    "Activation checkpointing (`torch.utils.checkpoint.checkpoint`) trades compute "
    "for memory in deep models.",
    "Free gradients between steps: `optimizer.zero_grad(set_to_none=True)`; run "
    "evaluation under `torch.no_grad()`.",
    "The failed cell's frames keep their tensors alive through `sys.last_traceback` "
    "(for `%debug`): 'Release references' frees them, then empty the cache.",
]


def out_of_memory(ctx: Context) -> Diagnosis | None:
    facts = parse_oom(ctx.message, ctx.exc_type)
    if facts is None:
        return None
    device = facts["device"]
    largest = ctx.scan_tensors(device.split(":")[0])[:5]
    return {
        "category": "out_of_memory",
        "title": "Out of memory",
        "headline": _oom_headline(device, facts, largest),
        "culprits": [as_culprit(r, r.get("frame"), role="large tensor") for r in largest],
        "remedy": _oom_remedy(device, facts),
        "hints": OOM_HINTS if device != "cpu" else OOM_HINTS[3:],
        "facts": facts,
        "links": ["memory"],
    }


# Any: parse_oom's facts (its own type, kernel/oom_text.py)
def _oom_headline(device: str, facts: dict[str, Any], largest: list[dict[str, object]]) -> str:
    """Where, how much was asked and free, and the largest tensor the frames name."""
    where = {"cpu": "CPU", "mps": "MPS"}.get(device, f"GPU {device.partition(':')[2] or '?'}")
    head = f"Out of memory on {where}"
    requested = facts["requested_bytes"]
    if requested is not None:
        head += f": tried to allocate {fmt_bytes(requested)}"
        if facts.get("free_bytes") is not None:
            head += f" with {fmt_bytes(facts['free_bytes'])} free"
            if facts.get("total_bytes") is not None:
                head += f" (of {fmt_bytes(facts['total_bytes'])})"
    if largest:
        top = largest[0]
        nbytes = top.get("nbytes")  # an int: _scan_tensors keeps only those
        size = fmt_bytes(nbytes if isinstance(nbytes, int) else None)
        head += f"; largest named tensor: `{top['name']}` ({size})"
    return head


# Any: parse_oom's facts (its own type, kernel/oom_text.py)
def _oom_remedy(device: str, facts: dict[str, Any]) -> str:
    """The one change the error's numbers point to (marks ``facts`` when it is
    fragmentation)."""
    requested = facts["requested_bytes"]
    unalloc = facts["reserved_unallocated_bytes"]
    allocated = facts.get("allocated_bytes") or 0
    total = facts.get("total_bytes")
    if (
        unalloc is not None
        and requested is not None
        and (unalloc >= requested or (allocated and unalloc > 0.2 * allocated))
    ):
        facts["fragmentation"] = True
        return (
            f"{fmt_bytes(unalloc)} is reserved but unallocated (fragmentation): set "
            "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` before CUDA starts "
            "(restart the kernel, set it in the first cell before importing torch)."
        )
    if requested is not None and total and requested > total // 2:
        return (
            f"One allocation of {fmt_bytes(requested)} is over half the device "
            f"({fmt_bytes(total)}): look for an unexpectedly large tensor (an accidental "
            "broadcast or outer product, a huge batch or sequence) before tuning anything."
        )
    if device == "cpu":
        return (
            "The process ran out of host memory: reduce the batch or the data held in "
            "memory, or free large variables (`del x`)."
        )
    return "Reduce the batch size (halve it), or accumulate gradients over smaller batches."


def device_side_assert(ctx: Context) -> Diagnosis | None:
    kind = sticky_cuda_error(ctx.message)
    if kind is None:
        return None
    facts: dict[str, object] = {"kind": kind, "sticky": True}
    culprits: list[Row] = []
    hints = [
        "Checks to run on CPU after the restart: class labels in [0, n_classes), "
        "embedding indices < num_embeddings, gather/index_select indices in range.",
    ]
    head = (
        "A CUDA kernel assertion failed (device-side assert)"
        if kind == "device_side_assert"
        else "An asynchronous CUDA error occurred"
    )
    loss = library_frame(ctx, self_types=LOSS_TYPES, functions=LOSS_FUNCS)
    emb = library_frame(ctx, self_types=("Embedding",), functions=("embedding",))
    if loss is not None and kind == "device_side_assert":
        n = n_classes(frame_row(ctx.frames[loss], "input"))
        facts["n_classes"] = n
        target = [c for c in library_args(ctx, loss) if c.get("arg") == "target"]
        culprits = target
        who = user_name_or(target[0] if target else None, "a")
        head += (
            f", reported in `{ctx.frames[loss].get('function')}`: the usual cause is {who} "
            f"label outside [0, {n if n is not None else 'n_classes'})"
        )
    elif emb is not None and kind == "device_side_assert":
        name, s = layer_label(ctx, emb)
        facts["num_embeddings"] = s.get("num_embeddings") if s else None
        head += f", reported in {name}: the usual cause is an index ≥ num_embeddings"
    return {
        "category": "device_side_assert" if kind == "device_side_assert" else "cuda_error",
        "title": "CUDA device-side assert" if kind == "device_side_assert" else "CUDA error",
        "headline": head,
        "culprits": culprits,
        "remedy": (
            "The CUDA context is now corrupted: restart the kernel. Then get the exact "
            "failing call: put `%env CUDA_LAUNCH_BLOCKING=1` in the first cell (before "
            "torch uses CUDA), or run the same batch on CPU for a readable error."
        ),
        "hints": [
            "CUDA reports errors asynchronously: the line shown may be a later call than "
            "the one that failed.",
            *hints,
        ],
        "facts": facts,
        "confidence": "likely" if culprits else "certain",
    }
