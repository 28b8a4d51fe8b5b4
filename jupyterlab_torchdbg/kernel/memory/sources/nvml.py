"""``NvmlSource``: device memory, utilisation, temperature and power from NVML.

Read through the extension's shared nvidia-ml-py session. It runs on the poller thread,
so it never touches torch, tensors or CUDA (R36). The slow running-processes query (this
kernel's own GPU memory) is made at most every 5 s. A field NVML cannot give (absent
library, NotSupported, MIG, containers) is n/a with its reason (R03, R37).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from .reading import DeviceInfo, DeviceReading, Number, Reading

if TYPE_CHECKING:
    from ...capabilities import Nvml

_T = TypeVar("_T")

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
        self._static: list[DeviceInfo] | None = None
        self._proc: dict[int, tuple[Number | None, str | None]] = {}
        self._proc_at = -1e18
        self._lock = threading.Lock()
        #: Set by the monitor: True once this process has a CUDA context (affects what an
        #: absent PID in the process list means).
        self.has_context: Callable[[], bool] = lambda: False

    def available(self) -> tuple[bool, str | None]:
        ok = self._nvml.init()
        return ok, None if ok else (self._nvml.reason or "NVML unavailable")

    def devices(self) -> list[DeviceInfo]:
        """Static identity of every NVML device: index, name, uuid, mig, pci."""
        with self._lock:
            if self._static is None:
                self._static = self._read_static()
            return self._static

    def _read_static(self) -> list[DeviceInfo]:
        if not self._nvml.init():
            return []
        lib = self._nvml.module
        try:
            count = int(lib.nvmlDeviceGetCount())
        except Exception:
            return []
        out = []
        for i in range(count):
            d: DeviceInfo = {"index": i, "name": None, "uuid": None, "mig": None}
            try:
                h = lib.nvmlDeviceGetHandleByIndex(i)
            except Exception:
                out.append(d)
                continue
            d["name"] = as_text(try_call(lambda: lib.nvmlDeviceGetName(h)))
            d["uuid"] = as_text(try_call(lambda: lib.nvmlDeviceGetUUID(h)))
            mode = try_call(lambda: lib.nvmlDeviceGetMigMode(h))
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
            d = DeviceReading(i, info=s.copy())
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
                mem = self._field(d, "used", lambda: lib.nvmlDeviceGetMemoryInfo(h))
                if mem is not None:
                    d.values["used"] = int(mem.used)
                    d.values["total"] = int(mem.total)
                else:
                    d.values["total"] = None
                    d.unavailable["total"] = d.unavailable["used"]
                util = self._field(d, "util_gpu", lambda: lib.nvmlDeviceGetUtilizationRates(h))
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
            t = self._field(d, "temperature_c", lambda: lib.nvmlDeviceGetTemperature(h, sensor))
            if t is not None:
                d.values["temperature_c"] = int(t)
            p = self._field(d, "power_w", lambda: lib.nvmlDeviceGetPowerUsage(h))
            if p is not None:
                d.values["power_w"] = round(p / 1000.0, 1)  # NVML reports milliwatts
            lim = self._field(d, "power_limit_w", lambda: lib.nvmlDeviceGetEnforcedPowerLimit(h))
            if lim is not None:
                d.values["power_limit_w"] = round(lim / 1000.0, 1)
            out.append(d)
        return Reading(True, None, out)

    @staticmethod
    def _field(d: DeviceReading, key: str, fn: Callable[[], _T]) -> _T | None:
        try:
            return fn()
        except Exception as e:
            d.values[key] = None
            d.unavailable[key] = nvml_reason(e)
            return None

    def _process_memory(
        self, lib: ModuleType, handle: object, index: int, refresh: bool
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


def try_call(fn: Callable[[], _T]) -> _T | None:
    try:
        return fn()
    except Exception:
        return None


def as_text(v: object) -> str | None:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v if isinstance(v, str) else None
