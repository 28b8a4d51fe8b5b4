"""The ``memory`` status message: why the panel shows what it shows, and the numbers.

State first (``corrupted`` / ``waiting`` / ``no_cuda`` / ``cuda_idle`` / ``active``, each
with the reason the panel prints), then one card per device (allocator counters and NVML
fields, matched by UUID, each with the reason when missing), the host RSS, the breakdown,
the recording state and the last OOM's headline. Small JSON; the monitor decides when it
is sent (``MemoryMonitor.publish``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .peaks import PEAK_NOTE
from .recording import HistoryRecorder
from .sources import ALLOCATOR_FIELDS, NVML_FIELDS, DeviceInfo, DeviceMapping, Reading

if TYPE_CHECKING:
    from ...protocol.messages import MemoryBreakdown
    from .leak import LeakWatch


class MemoryMonitor(Protocol):
    """What the message is made of (``monitor.MemoryMonitor`` holds it)."""

    corrupted: str | None
    alloc_reading: Reading | None
    nvml_reading: Reading | None
    rss: int | None
    rss_reason: str | None
    breakdown: MemoryBreakdown | None
    last_oom: dict[str, object] | None
    recorder: HistoryRecorder
    leak: LeakWatch
    _wall: Callable[[], float]

    def nvml_devices(self) -> list[DeviceInfo]: ...

    def mapping(self) -> list[DeviceMapping]: ...


ALLOCATOR_SERIES = (
    "allocated",
    "reserved",
    "peak",
    "inactive_split",
    "peak_interval",
    "peak_exact",
)


def _state(mon: MemoryMonitor, mapping: list[DeviceMapping]) -> tuple[str, str | None]:
    if mon.corrupted:
        return "corrupted", mon.corrupted
    torch = sys.modules.get("torch")
    if torch is None:
        return "waiting", "torch is not imported yet"
    r = mon.alloc_reading
    if r is not None and r.available:
        return "active", None
    if not getattr(getattr(torch, "version", None), "cuda", None):
        return "no_cuda", "no CUDA device: this torch build is CPU-only"
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "" or (
        mon.nvml_devices() == [] and _nvml_available(mon)
    ):
        return "no_cuda", "no CUDA device visible to this kernel"
    why = "CUDA is not initialised yet: allocator numbers appear once your code uses it"
    if not _nvml_available(mon):
        why += f"; {_nvml_reason(mon) or 'NVML unavailable'}"
    return "cuda_idle", why


def _nvml_available(mon: MemoryMonitor) -> bool:
    r = mon.nvml_reading
    return bool(r is not None and r.available)


def _nvml_reason(mon: MemoryMonitor) -> str | None:
    r = mon.nvml_reading
    if r is None:
        return "NVML not read yet"
    return r.reason


def memory_message(mon: MemoryMonitor) -> dict[str, object]:
    """The ``memory`` message: state, device cards, host, breakdown, recording, last OOM."""
    mapping = mon.mapping()
    state, reason = _state(mon, mapping)
    alloc = mon.alloc_reading
    nv = mon.nvml_reading
    by_nvml = {d["index"]: d for d in mon.nvml_devices()}
    devices = []
    for m in mapping:
        a = alloc.device(m.torch_index) if alloc is not None and alloc.available else None
        n = None
        if nv is not None and nv.available and m.nvml_index is not None:
            n = nv.device(m.nvml_index)
        static = by_nvml.get(m.nvml_index, {}) if m.nvml_index is not None else {}
        name = (a.info.get("name") if a else None) or static.get("name")
        dev = f"cuda:{m.torch_index}"
        entry: dict[str, object] = {
            "device": dev,
            "index": m.torch_index,
            "name": name,
            "uuid": m.uuid,
            "nvml_index": m.nvml_index,
            "matched_by": m.matched_by,
            "mig": static.get("mig"),
            "series": {
                **{k: f"mem/{dev}/{k}" for k in ALLOCATOR_SERIES},
                "nvml_used": f"mem/{dev}/nvml_used",
            },
            "allocator": {k: a.values.get(k) for k in ALLOCATOR_FIELDS} if a else None,
            "allocator_reason": None
            if a is not None
            else (alloc.reason if alloc is not None else "not sampled yet"),
            "nvml": {k: n.values.get(k) for k in NVML_FIELDS} if n is not None else None,
            "nvml_reason": None if n is not None else _device_nvml_reason(mon, m),
            "unavailable": dict(n.unavailable) if n is not None else {},
            "peak_note": PEAK_NOTE,
        }
        devices.append(entry)
    nvml_ok = _nvml_available(mon)
    return {
        "method": "memory",
        "time": round(mon._wall(), 3),
        "state": state,
        "reason": reason,
        "devices": devices,
        "host": {"rss": mon.rss, "reason": mon.rss_reason, "series": "mem/cpu/rss"},
        "breakdown": mon.breakdown,
        "recording": mon.recorder.status(),
        "last_oom": None
        if mon.last_oom is None
        else {
            "id": mon.last_oom["id"],
            "time": mon.last_oom["time"],
            "device": mon.last_oom["device"],
            "headline": mon.last_oom["headline"],
        },
        "nvml": {
            "available": nvml_ok,
            "reason": None if nvml_ok else _nvml_reason(mon),
        },
        "activations": getattr(getattr(mon, "activations", None), "report", None),
        "leak": mon.leak.leak,
        "guard": mon.leak.guard_json(),
    }


def _device_nvml_reason(mon: MemoryMonitor, m: DeviceMapping) -> str:
    if not _nvml_available(mon):
        return _nvml_reason(mon) or "NVML unavailable"
    if m.nvml_index is None:
        return "no NVML device matches this device's UUID (a MIG instance?)"
    return "NVML has no reading for this device"
