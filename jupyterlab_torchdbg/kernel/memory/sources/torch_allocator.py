"""``TorchAllocatorSource``: the CUDA caching allocator's host-side counters.

Read only once the user's code has initialised CUDA: it never initialises it (R02), and
it stops reading after a sticky CUDA error (R22).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

from .reading import DeviceInfo, DeviceReading, Reading

#: Allocator fields, from ``torch.cuda.memory_stats`` (nested form, no flattening cost).
ALLOCATOR_FIELDS = (
    "allocated",
    "reserved",
    "peak",
    "active",
    "inactive_split",
    "alloc_retries",
    "ooms",
)


class TorchAllocatorSource:
    """Host-side counters of torch's CUDA caching allocator (no device call, no sync).

    ``corrupted()`` returns a reason once a sticky CUDA error was seen: from then on the
    source reports itself unavailable rather than touch CUDA again (R22).
    """

    kind = "allocator"

    def __init__(self, corrupted: Callable[[], str | None] = lambda: None) -> None:
        self._corrupted = corrupted
        self._info: dict[int, DeviceInfo] = {}

    def state(self) -> tuple[ModuleType | None, str | None]:
        """(torch, None) when the counters can be read now, else (None, reason)."""
        torch = sys.modules.get("torch")
        if torch is None:
            return None, "torch is not imported yet"
        if not getattr(getattr(torch, "version", None), "cuda", None):
            return None, "this torch build has no CUDA support"
        bad = self._corrupted()
        if bad:
            return None, bad
        try:
            initialized = bool(torch.cuda.is_initialized())
        except Exception:
            initialized = False
        if not initialized:
            # Reading would not initialise CUDA either, but there is nothing to read, and
            # device_count()/properties before init are exactly what R02 forbids.
            return None, "CUDA is not initialised yet (the tool never initialises it)"
        return torch, None

    def read(self) -> Reading:
        torch, reason = self.state()
        if torch is None:
            return Reading(False, reason)
        try:
            count = int(torch.cuda.device_count())
        except Exception as e:
            return Reading(False, f"device count unavailable: {type(e).__name__}")
        out: list[DeviceReading] = []
        for i in range(count):
            d = DeviceReading(i, info=self._device_info(torch, i))
            try:
                s = torch.cuda.memory.memory_stats_as_nested_dict(i)
                d.values = {
                    "allocated": _stat(s, "allocated_bytes", "current"),
                    "reserved": _stat(s, "reserved_bytes", "current"),
                    "peak": _stat(s, "allocated_bytes", "peak"),
                    "active": _stat(s, "active_bytes", "current"),
                    "inactive_split": _stat(s, "inactive_split_bytes", "current"),
                    "alloc_retries": int(s.get("num_alloc_retries", 0) or 0),
                    "ooms": int(s.get("num_ooms", 0) or 0),
                }
            except Exception as e:
                d.values = dict.fromkeys(ALLOCATOR_FIELDS)
                d.unavailable = dict.fromkeys(ALLOCATOR_FIELDS, f"unreadable: {type(e).__name__}")
            out.append(d)
        return Reading(True, None, out)

    def _device_info(self, torch: ModuleType, i: int) -> DeviceInfo:
        # Properties are cached by torch once CUDA is initialised; read them once anyway.
        info: DeviceInfo | None = self._info.get(i)
        if info is None:
            info = {"name": None, "uuid": None, "total": None}
            try:
                p = torch.cuda.get_device_properties(i)
                info = {
                    "name": str(p.name),
                    "uuid": _torch_uuid(p),
                    "total": int(p.total_memory),
                }
            except Exception:
                pass
            self._info[i] = info
        return info

    def summary(self, index: int) -> str | None:
        """``torch.cuda.memory_summary`` text (host-side formatting of the counters)."""
        torch, _ = self.state()
        if torch is None:
            return None
        try:
            return str(torch.cuda.memory_summary(index))
        except Exception:
            return None


def _stat(s: dict[str, object], name: str, which: str) -> int:
    try:
        entry = s[name]
        pool = entry["all"] if isinstance(entry, dict) else None
        return int(pool[which]) if isinstance(pool, dict) else 0
    except (KeyError, TypeError, ValueError):
        return 0


def _torch_uuid(props: object) -> str | None:
    u = getattr(props, "uuid", None)
    if u is None:
        return None
    text = str(u)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
