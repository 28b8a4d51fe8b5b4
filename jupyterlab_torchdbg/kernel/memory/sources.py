"""Where memory numbers come from: torch's caching allocator, NVML, the host, or a recording.

Every source implements ``MemorySource.read() -> Reading``: per device a dict of numbers,
each field either a number or missing with a reason in ``unavailable`` (R03, R37). The
monitor and the autopsy only see readings, so CPU tests drive them with a
``RecordedSource`` and ``tests/gpu`` runs the real ones.

- ``TorchAllocatorSource`` reads the caching allocator's host-side counters, and only once
  the user's code has initialised CUDA: it never initialises it (R02) and stops reading
  after a sticky CUDA error (R22).
- ``NvmlSource`` reads NVML (nvidia-ml-py) through the extension's shared session. It runs
  on the poller thread, so it never touches torch, tensors or CUDA (R36). The slow
  running-processes query (this kernel's own GPU memory) is made at most every 5 s.
- ``HostSource`` reads this process's resident set size.
- ``map_devices`` pairs torch's ``cuda:N`` with NVML devices by UUID, honouring
  ``CUDA_VISIBLE_DEVICES`` in index or UUID form (R38).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..capabilities import Nvml

Number = int | float


@dataclass
class DeviceReading:
    """One device's numbers. ``values[k] is None`` means n/a, with ``unavailable[k]``."""

    index: int
    values: dict[str, Number | None] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    #: Identity: name, uuid, mig, ... (strings and booleans).
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Reading:
    """What a source saw at one moment. ``available`` False: ``reason`` says why."""

    available: bool
    reason: str | None = None
    devices: list[DeviceReading] = field(default_factory=list)

    def device(self, index: int) -> DeviceReading | None:
        return next((d for d in self.devices if d.index == index), None)


class MemorySource(Protocol):
    """A reader of per-device memory numbers. ``read`` never raises."""

    kind: str

    def read(self) -> Reading: ...


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
#: NVML fields per device.
NVML_FIELDS = (
    "used",
    "total",
    "util_gpu",
    "util_memory",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "process_used",
)


# --- torch's caching allocator ------------------------------------------------------------


class TorchAllocatorSource:
    """Host-side counters of torch's CUDA caching allocator (no device call, no sync).

    ``corrupted()`` returns a reason once a sticky CUDA error was seen: from then on the
    source reports itself unavailable rather than touch CUDA again (R22).
    """

    kind = "allocator"

    def __init__(self, corrupted: Callable[[], str | None] = lambda: None) -> None:
        self._corrupted = corrupted
        self._info: dict[int, dict[str, Any]] = {}

    def state(self) -> tuple[Any, str | None]:
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

    def _device_info(self, torch: Any, i: int) -> dict[str, Any]:
        # Properties are cached by torch once CUDA is initialised; read them once anyway.
        info = self._info.get(i)
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


def _stat(s: dict[str, Any], name: str, which: str) -> int:
    try:
        return int(s[name]["all"][which])
    except (KeyError, TypeError, ValueError):
        return 0


def _torch_uuid(props: Any) -> str | None:
    u = getattr(props, "uuid", None)
    if u is None:
        return None
    text = str(u)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


# --- NVML -------------------------------------------------------------------------------


_NVML_REASONS = {
    "NVMLError_NotSupported": "not supported by this GPU or driver",
    "NVMLError_NoPermission": "no permission to read it",
    "NVMLError_GpuIsLost": "the GPU is lost (driver reset needed)",
    "NVMLError_Uninitialized": "NVML is not initialised",
    "NVMLError_DriverNotLoaded": "the NVIDIA driver is not loaded",
    "NVMLError_LibraryNotFound": "the NVML library was not found (no NVIDIA driver)",
    "NVMLError_Unknown": "NVML reported an unknown error",
}


def nvml_reason(e: BaseException) -> str:
    """A readable reason for an NVML failure (never the message: it may be bytes)."""
    name = type(e).__name__
    return _NVML_REASONS.get(name, f"NVML error: {name}")


class NvmlSource:
    """Device memory, utilisation, temperature, power and this process's memory via NVML.

    Called only from the poller thread. Every field is read on its own, so one
    NotSupported (a MIG slice, a consumer card without power readings, a container
    without permission) blanks that field only (R37).
    """

    kind = "nvml"

    #: Seconds between the running-processes queries (slow: it walks every process).
    PROCESS_EVERY_S = 5.0

    def __init__(
        self,
        nvml: Nvml,
        *,
        pid: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml = nvml
        self._pid = os.getpid() if pid is None else pid
        self._clock = clock
        self._static: list[dict[str, Any]] | None = None
        self._proc: dict[int, tuple[Number | None, str | None]] = {}
        self._proc_at = -1e18
        self._lock = threading.Lock()
        #: Set by the monitor: True once this process has a CUDA context (affects what an
        #: absent PID in the process list means).
        self.has_context: Callable[[], bool] = lambda: False

    def available(self) -> tuple[bool, str | None]:
        ok = self._nvml.init()
        return ok, None if ok else (self._nvml.reason or "NVML unavailable")

    def devices(self) -> list[dict[str, Any]]:
        """Static identity of every NVML device: index, name, uuid, mig, pci."""
        with self._lock:
            if self._static is None:
                self._static = self._read_static()
            return self._static

    def _read_static(self) -> list[dict[str, Any]]:
        if not self._nvml.init():
            return []
        lib = self._nvml.module
        try:
            count = int(lib.nvmlDeviceGetCount())
        except Exception:
            return []
        out = []
        for i in range(count):
            d: dict[str, Any] = {"index": i, "name": None, "uuid": None, "mig": None}
            try:
                h = lib.nvmlDeviceGetHandleByIndex(i)
            except Exception:
                out.append(d)
                continue
            d["name"] = _text(_try(lambda h=h: lib.nvmlDeviceGetName(h)))
            d["uuid"] = _text(_try(lambda h=h: lib.nvmlDeviceGetUUID(h)))
            mode = _try(lambda h=h: lib.nvmlDeviceGetMigMode(h))
            if isinstance(mode, (list, tuple)) and mode:
                d["mig"] = mode[0] == getattr(lib, "NVML_DEVICE_MIG_ENABLE", 1)
            elif mode is not None:
                d["mig"] = False
            out.append(d)
        return out

    def read(self) -> Reading:
        ok, reason = self.available()
        if not ok:
            return Reading(False, reason)
        lib = self._nvml.module
        static = self.devices()
        if not static:
            return Reading(False, "NVML reports no device")
        refresh_procs = self._clock() - self._proc_at >= self.PROCESS_EVERY_S
        if refresh_procs:
            self._proc_at = self._clock()
        out: list[DeviceReading] = []
        for s in static:
            i = s["index"]
            d = DeviceReading(i, info=dict(s))
            try:
                h = lib.nvmlDeviceGetHandleByIndex(i)
            except Exception as e:
                d.values = dict.fromkeys(NVML_FIELDS)
                d.unavailable = dict.fromkeys(NVML_FIELDS, nvml_reason(e))
                out.append(d)
                continue
            if s.get("mig"):
                # A MIG-partitioned GPU: the whole-GPU memory and utilisation are not this
                # kernel's slice, and per-process accounting is not reported.
                why = "MIG is enabled: not reported per instance (see the allocator numbers)"
                for k in ("used", "total", "util_gpu", "util_memory", "process_used"):
                    d.values[k] = None
                    d.unavailable[k] = why
            else:
                mem = self._field(d, "used", lambda h=h: lib.nvmlDeviceGetMemoryInfo(h))
                if mem is not None:
                    d.values["used"] = int(mem.used)
                    d.values["total"] = int(mem.total)
                else:
                    d.values["total"] = None
                    d.unavailable["total"] = d.unavailable["used"]
                util = self._field(d, "util_gpu", lambda h=h: lib.nvmlDeviceGetUtilizationRates(h))
                if util is not None:
                    d.values["util_gpu"] = int(util.gpu)
                    d.values["util_memory"] = int(util.memory)
                else:
                    d.values["util_memory"] = None
                    d.unavailable["util_memory"] = d.unavailable["util_gpu"]
                d.values["process_used"], why_p = self._process_memory(lib, h, i, refresh_procs)
                if why_p:
                    d.unavailable["process_used"] = why_p
            sensor = getattr(lib, "NVML_TEMPERATURE_GPU", 0)
            t = self._field(d, "temperature_c", lambda h=h: lib.nvmlDeviceGetTemperature(h, sensor))
            if t is not None:
                d.values["temperature_c"] = int(t)
            p = self._field(d, "power_w", lambda h=h: lib.nvmlDeviceGetPowerUsage(h))
            if p is not None:
                d.values["power_w"] = round(p / 1000.0, 1)  # NVML reports milliwatts
            lim = self._field(
                d, "power_limit_w", lambda h=h: lib.nvmlDeviceGetEnforcedPowerLimit(h)
            )
            if lim is not None:
                d.values["power_limit_w"] = round(lim / 1000.0, 1)
            out.append(d)
        return Reading(True, None, out)

    @staticmethod
    def _field(d: DeviceReading, key: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:
            d.values[key] = None
            d.unavailable[key] = nvml_reason(e)
            return None

    def _process_memory(
        self, lib: Any, handle: Any, index: int, refresh: bool
    ) -> tuple[Number | None, str | None]:
        if not refresh and index in self._proc:
            return self._proc[index]
        try:
            procs = lib.nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception as e:
            result: tuple[Number | None, str | None] = (None, nvml_reason(e))
        else:
            mine = [p for p in procs or [] if getattr(p, "pid", None) == self._pid]
            if mine:
                used = [getattr(p, "usedGpuMemory", None) for p in mine]
                if any(u is None for u in used):
                    result = (None, "the driver does not report per-process memory here")
                else:
                    result = (int(sum(used)), None)  # type: ignore[arg-type]
            elif self.has_context():
                # We hold a CUDA context yet are not listed: NVML sees another PID
                # namespace (a container) or hides other processes.
                result = (None, "this kernel is not in NVML's process list (container PID?)")
            else:
                result = (0, None)  # no CUDA context in this process: nothing on this GPU
        self._proc[index] = result
        return result


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _text(v: Any) -> str | None:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v if isinstance(v, str) else None


# --- the host ------------------------------------------------------------------------------


class HostSource:
    """This process's resident set size (device index 0 = the host)."""

    kind = "host"

    def __init__(self) -> None:
        try:
            self._page = os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            self._page = 4096

    def read(self) -> Reading:
        rss, why = self.rss()
        d = DeviceReading(0, {"rss": rss}, {"rss": why} if why else {})
        return Reading(True, None, [d])

    def rss(self) -> tuple[int | None, str | None]:
        try:
            with open("/proc/self/statm", "rb") as f:
                return int(f.read().split()[1]) * self._page, None
        except (OSError, ValueError, IndexError):
            pass
        try:
            import psutil

            return int(psutil.Process().memory_info().rss), None
        except Exception:
            return None, "resident memory unavailable on this platform (install psutil)"


# --- a recording, for tests and demos ---------------------------------------------------------


class RecordedSource:
    """Replays recorded readings in order, then keeps returning the last one.

    The CPU tests drive the monitor and the autopsy with it (a CUDA allocator or an NVML
    that is absent, NotSupported, MIG, ... without any GPU).
    """

    def __init__(self, kind: str, readings: Sequence[Reading]) -> None:
        if not readings:
            raise ValueError("a recording needs at least one reading")
        self.kind = kind
        self._readings = list(readings)
        self.calls = 0

    def read(self) -> Reading:
        r = self._readings[min(self.calls, len(self._readings) - 1)]
        self.calls += 1
        return r


# --- torch device <-> NVML device ----------------------------------------------------------


@dataclass(frozen=True)
class DeviceMapping:
    """``cuda:<torch_index>`` is NVML device ``nvml_index`` (None: not matched)."""

    torch_index: int
    nvml_index: int | None
    uuid: str | None
    #: "uuid": by UUID (authoritative); "visible_devices": an index in CUDA_VISIBLE_DEVICES
    #: with CUDA_DEVICE_ORDER=PCI_BUS_ID (NVML's order); "assumed_order": an index whose
    #: order CUDA may choose differently (FASTEST_FIRST); None: no NVML device.
    matched_by: str | None


def _norm_uuid(u: str) -> str:
    u = u.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if u.startswith(prefix):
            u = u[len(prefix) :]
    return u.replace("-", "")


def map_devices(
    nvml_devices: Sequence[dict[str, Any]],
    *,
    visible: str | None,
    order: str | None = None,
    torch_uuids: Sequence[str | None] | None = None,
) -> list[DeviceMapping]:
    """Pair torch's devices with NVML's (R38).

    Once CUDA is initialised ``torch_uuids`` (from the device properties) decide: the
    mapping is by UUID, whatever ``CUDA_VISIBLE_DEVICES`` says. Before that, the
    environment decides as CUDA will: entries are indices or (prefixes of) UUIDs; the
    list ends at the first invalid or repeated entry; unset means every device.
    """
    by_uuid = {_norm_uuid(d["uuid"]): d for d in nvml_devices if d.get("uuid")}
    if torch_uuids is not None:
        out = []
        for i, u in enumerate(torch_uuids):
            d = by_uuid.get(_norm_uuid(u)) if u else None
            if d is None:
                out.append(DeviceMapping(i, None, u, None))
            else:
                out.append(DeviceMapping(i, d["index"], d.get("uuid"), "uuid"))
        return out
    pci = (order or "").strip().upper() == "PCI_BUS_ID"
    index_kind = "visible_devices" if pci else "assumed_order"
    if visible is None:
        return [
            DeviceMapping(i, d["index"], d.get("uuid"), "pci_order" if pci else "assumed_order")
            for i, d in enumerate(nvml_devices)
        ]
    out = []
    used: set[int] = set()
    for raw in visible.split(","):
        entry = raw.strip()
        if not entry:
            break
        low = entry.lower()
        if low.startswith("mig-"):
            # A MIG instance: a valid CUDA device, but not one of NVML's whole GPUs.
            out.append(DeviceMapping(len(out), None, entry, None))
            continue
        if low.startswith("gpu-"):
            want = _norm_uuid(entry)
            hits = [d for u, d in by_uuid.items() if u.startswith(want)]
            if len(hits) != 1 or hits[0]["index"] in used:
                break  # unknown or ambiguous UUID: CUDA ignores it and the rest
            d = hits[0]
            used.add(d["index"])
            out.append(DeviceMapping(len(out), d["index"], d.get("uuid"), "uuid"))
            continue
        try:
            n = int(entry)
        except ValueError:
            break
        if n < 0 or n >= len(nvml_devices) or n in used:
            break
        used.add(n)
        d = nvml_devices[n]
        out.append(DeviceMapping(len(out), d["index"], d.get("uuid"), index_kind))
    return out
