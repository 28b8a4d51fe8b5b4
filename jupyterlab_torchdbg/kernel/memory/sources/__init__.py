"""Where memory numbers come from: torch's caching allocator, NVML, the host, or a recording.

Every source implements ``MemorySource.read() -> Reading`` (``reading``): per device a
dict of numbers, each field either a number or missing with a reason in ``unavailable``
(R03, R37). The monitor and the autopsy only see readings, so CPU tests drive them with
a ``RecordedSource`` and ``tests/gpu`` runs the real ones.

One file per source: ``torch_allocator`` (``TorchAllocatorSource``: never initialises
CUDA, R02; stops after a sticky CUDA error, R22), ``nvml`` (``NvmlSource``: poller
thread only, never touches torch, R36), ``host`` (``HostSource``: this process's RSS),
``recorded`` (``RecordedSource``); and ``device_map`` (``map_devices``: torch's
``cuda:N`` paired with NVML devices by UUID, honouring ``CUDA_VISIBLE_DEVICES``, R38).
"""

from __future__ import annotations

from .device_map import DeviceMapping, map_devices
from .host import HostSource
from .nvml import NVML_FIELDS, NvmlSource, nvml_reason
from .reading import DeviceInfo, DeviceReading, MemorySource, Number, Reading
from .recorded import RecordedSource
from .torch_allocator import ALLOCATOR_FIELDS, TorchAllocatorSource

__all__ = [
    "ALLOCATOR_FIELDS",
    "NVML_FIELDS",
    "DeviceInfo",
    "DeviceMapping",
    "DeviceReading",
    "HostSource",
    "MemorySource",
    "Number",
    "NvmlSource",
    "Reading",
    "RecordedSource",
    "TorchAllocatorSource",
    "map_devices",
    "nvml_reason",
]
