"""How much is free for activations, and the batch that fits: the numbers and the words.

Read at the end of the measured forward, when every activation it saved is allocated
(the forward's high point; the backward frees them as it goes):

- CUDA (``device``): ``free = total - reserved`` of the measured device, from the
  caching allocator's host-side counters and the device's total (no device call, no
  sync). Reserved, not allocated: the cache already holds the blocks of the last
  step's peak, and another process's memory is not counted (NVML would be needed).
- CPU: the kernel's cgroup ``memory.max - memory.current`` when a limit is set
  (``cgroup``), else the host's ``MemAvailable`` (``host``).

The estimate: ``fits = batch + floor(free / per_sample)``. The measured batch's
activations are already part of what is used, so only the samples added beyond it need
``free``; this is the batch whose *saved activations* fit. It is an upper bound: the
backward's temporaries and the activation gradients grow with the batch too, and
fragmentation may leave part of ``free`` unusable. The text says so.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ...units import fmt_bytes

if TYPE_CHECKING:
    from .measure import Saved

CGROUP = "/sys/fs/cgroup"


def memory_limit(
    root: str = CGROUP, meminfo: str = "/proc/meminfo"
) -> tuple[int | None, str | None]:
    """(bytes free under the process's memory limit, "cgroup" / "host"), or (None, None).

    (Another helper may write one in ``memory/leak``; to be merged into one.)"""
    for limit_name, used_name in (("memory.max", "memory.current"),):  # cgroup v2
        try:
            with open(os.path.join(root, limit_name)) as f:
                limit = f.read().strip()
            with open(os.path.join(root, used_name)) as f:
                used = int(f.read().strip())
            if limit != "max" and int(limit) < 2**60:
                return max(0, int(limit) - used), "cgroup"
        except (OSError, ValueError):
            pass
    try:  # cgroup v1
        with open(os.path.join(root, "memory", "memory.limit_in_bytes")) as f:
            limit_v1 = int(f.read().strip())
        with open(os.path.join(root, "memory", "memory.usage_in_bytes")) as f:
            used_v1 = int(f.read().strip())
        if limit_v1 < 2**60:
            return max(0, limit_v1 - used_v1), "cgroup"
    except (OSError, ValueError):
        pass
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "host"
    except (OSError, ValueError, IndexError):
        pass
    return None, None


def cuda_free(device: str) -> int | None:
    """``total - reserved`` of ``device`` ("cuda:0"), host-side counters only."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
        stats = torch.cuda.memory.memory_stats_as_nested_dict(index)
        reserved = int(stats["reserved_bytes"]["all"]["current"])
        total = int(torch.cuda.get_device_properties(index).total_memory)
    except Exception:
        return None
    return max(0, total - reserved)


def free_for(device: str | None) -> tuple[int | None, str | None]:
    """(free bytes, limit_source) for the device the activations live on."""
    if device is not None and device.startswith("cuda"):
        free = cuda_free(device)
        return free, ("device" if free is not None else None)
    return memory_limit()


def fits(batch: int | None, per_sample: int | None, free: int | None) -> int | None:
    if not batch or not per_sample or free is None:
        return None
    return batch + free // per_sample


def words(
    batch: int | None,
    total: int,
    per_sample: int | None,
    free: int | None,
    source: str | None,
    fit: int | None,
    top: str | None,
) -> str:
    """One paragraph: what the batch saves, what is free, the batch that fits and why it
    is an upper bound."""
    what = f"batch {batch}" if batch else "the forward"
    text = f"{what} saves {fmt_bytes(total)} for backward"
    if per_sample:
        text += f" ({fmt_bytes(per_sample)} per sample)"
    text += "."
    if top:
        text += f" Most is saved by {top}."
    where = {
        "device": "the device's total minus what the allocator reserves",
        "cgroup": "the kernel's cgroup limit minus its usage",
        "host": "the host's available memory",
    }.get(source or "", "")
    if free is not None:
        text += f" Free: {fmt_bytes(free)} ({where})."
    if fit is not None and batch:
        text += (
            f" About {fit} samples per batch fit: the measured {batch} are already in use, "
            f"and the free memory holds {fit - batch} more at this cost. An upper bound: "
            "the backward's temporaries grow with the batch too."
        )
    elif not batch:
        text += " No batch size: the model's first argument is not a tensor with a batch dimension."
    return text


def report_fields(saved: Saved, top_n: int = 12) -> dict[str, object]:
    """The ``Activations`` numbers of a finished ``measure.Saved``."""
    total = int(saved.total)
    batch = saved.batch
    per_sample = total // batch if batch else None
    free, source = free_for(saved.device)
    fit = fits(batch, per_sample, free)
    rows = sorted(saved.modules.items(), key=lambda kv: -kv[1][0])[:top_n]
    modules = [{"name": n, "bytes": int(b), "tensors": int(c)} for n, (b, c) in rows]
    top = f"{rows[0][0]} ({fmt_bytes(rows[0][1][0])})" if rows else None
    return {
        "device": saved.device,
        "batch": batch,
        "total": total,
        "per_sample": per_sample,
        "modules": modules,
        "free": free,
        "limit_source": source,
        "fits": fit,
        "text": words(batch, total, per_sample, free, source, fit, top),
    }
