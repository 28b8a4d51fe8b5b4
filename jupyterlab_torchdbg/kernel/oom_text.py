"""What a PyTorch error message says about memory: an out-of-memory error's numbers and
the sticky CUDA errors.

Neutral ground, like ``units.py``: the exception diagnosis (``exceptions/diagnose``) and
the memory panel (its OOM autopsy, its refusal to touch a broken CUDA context) read the
messages the same way with these, so neither imports the other.
"""

from __future__ import annotations

import re
from typing import Any

from .units import BYTE_UNITS

_UNITS = BYTE_UNITS
_SIZE = r"(\d+(?:\.\d+)?)\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b"


def _bytes(m: re.Match[str] | None, at: int = 1) -> int | None:
    if m is None:
        return None
    return int(float(m.group(at)) * _UNITS[m.group(at + 1)])


# Any: read by key with numeric use by exceptions/diagnose and memory/autopsy, which add keys
def parse_oom(message: str, exc_type: str = "") -> dict[str, Any] | None:
    """The numbers in an out-of-memory message, or None when it is not one.

    Shared by the exception diagnosis and the memory panel's OOM autopsy:
    ``device`` ("cuda:N", "cuda", "cpu", "mps"), ``requested_bytes``, and where the message
    has them ``total_bytes``, ``free_bytes``, ``allocated_bytes`` (by PyTorch),
    ``reserved_unallocated_bytes`` and ``process_bytes``.
    """
    msg = message
    low = msg.lower()
    cuda = "cuda out of memory" in low or (exc_type == "OutOfMemoryError" and "cpu" not in low)
    cpu = "can't allocate memory" in low or "defaultcpuallocator" in low
    mps = "mps backend out of memory" in low
    if not (cuda or cpu or mps or "out of memory" in low):
        return None
    facts: dict[str, int | str | None] = {}
    gpu = re.search(r"GPU (\d+) has a total capacity of " + _SIZE + r" of which " + _SIZE, msg)
    device = "cpu" if cpu else "mps" if mps else "cuda"
    if gpu is not None:
        device = f"cuda:{gpu.group(1)}"
        facts["total_bytes"] = _bytes(gpu, 2)
        facts["free_bytes"] = _bytes(gpu, 4)
    facts["device"] = device
    req = re.search(r"Tried to allocate " + _SIZE, msg, re.I)
    requested = _bytes(req)
    if requested is None:
        m = re.search(r"you tried to allocate (\d+) bytes", msg)
        requested = int(m.group(1)) if m else None
    facts["requested_bytes"] = requested
    facts["allocated_bytes"] = _bytes(re.search(_SIZE + r" is allocated by PyTorch", msg))
    unalloc = _bytes(re.search(_SIZE + r" is reserved by PyTorch but unallocated", msg))
    facts["reserved_unallocated_bytes"] = unalloc
    facts["process_bytes"] = _bytes(re.search(r"this process has " + _SIZE + " memory in use", msg))
    return facts


_STICKY = [
    (r"device-side assert", "device_side_assert"),
    (r"illegal memory access", "illegal_memory_access"),
    (r"unspecified launch failure", "launch_failure"),
    (r"misaligned address", "misaligned_address"),
    (r"illegal instruction", "illegal_instruction"),
]


def sticky_cuda_error(message: str) -> str | None:
    """The kind of sticky CUDA error ``message`` reports (the context is then unusable), or
    None. The memory panel stops touching CUDA after one (R22)."""
    return next((k for p, k in _STICKY if re.search(p, message)), None)
