"""Memory sources without a GPU: NVML absent / NotSupported / MIG / containers (R03, R37),
torch device <-> NVML device mapping (R38), the allocator source never initialising CUDA
(R02), the host RSS and the recorded fake."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from jupyterlab_torchdbg.kernel.capabilities import Nvml
from jupyterlab_torchdbg.kernel.memory.sources import (
    DeviceReading,
    HostSource,
    NvmlSource,
    Reading,
    RecordedSource,
    TorchAllocatorSource,
    map_devices,
)

# --- a fake NVML library (the shape of nvidia-ml-py's pynvml) -----------------------------


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # pynvml's own class names
    pass


class NVMLError_NoPermission(NVMLError):
    pass


class FakeNvmlLib:
    """``devices``: dicts with name/uuid/mig/used/total/util/temp/power/procs, and
    ``fail``: {function name: exception class} to make one call raise."""

    NVML_TEMPERATURE_GPU = 0
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, devices: list[dict[str, Any]]) -> None:
        self.devices = devices
        self.calls: list[str] = []

    def _dev(self, name: str, h: int) -> dict[str, Any]:
        self.calls.append(name)
        d = self.devices[h]
        err = d.get("fail", {}).get(name)
        if err is not None:
            raise err()
        return d

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self._dev("name", h)["name"].encode()  # old pynvml versions return bytes

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._dev("uuid", h)["uuid"]

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        return [1 if self._dev("mig", h).get("mig") else 0, 0]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        d = self._dev("memory", h)
        return SimpleNamespace(used=d["used"], total=d["total"], free=d["total"] - d["used"])

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        d = self._dev("util", h)
        return SimpleNamespace(gpu=d["util"], memory=d["util"] // 2)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._dev("temperature", h)["temp"]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._dev("power", h)["power_mw"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._dev("power_limit", h)["limit_mw"]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self._dev("procs", h)["procs"]]


def gpu(i: int, **kw: Any) -> dict[str, Any]:
    d = {
        "name": f"GPU {i}",
        "uuid": f"GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}",
        "mig": False,
        "used": 1_000 * (i + 1),
        "total": 80_000,
        "util": 50,
        "temp": 40 + i,
        "power_mw": 123_456,
        "limit_mw": 700_000,
        "procs": [(4242, 512)],
    }
    d.update(kw)
    return d


def session_with(lib: FakeNvmlLib) -> Nvml:
    n = Nvml()
    n.module, n._tried = lib, True
    return n


# --- NVML ----------------------------------------------------------------------------------


def test_r03_no_nvml_library_is_a_reason_not_an_error() -> None:
    r = NvmlSource(Nvml()).read()  # this machine has no NVIDIA driver
    assert r.available is False and r.devices == []
    assert "NVML" in (r.reason or "")


def test_nvml_fields_read_with_units() -> None:
    src = NvmlSource(session_with(FakeNvmlLib([gpu(0)])), pid=4242)
    src.has_context = lambda: True
    r = src.read()
    assert r.available
    (d,) = r.devices
    assert d.info["name"] == "GPU 0" and d.info["uuid"].startswith("GPU-")
    assert d.values == {
        "used": 1000,
        "total": 80_000,
        "util_gpu": 50,
        "util_memory": 25,
        "process_used": 512,
        "temperature_c": 40,
        "power_w": 123.5,
        "power_limit_w": 700.0,
    }
    assert d.unavailable == {}


def test_r37_not_supported_fields_are_na_with_reason_each() -> None:
    lib = FakeNvmlLib(
        [
            gpu(
                0,
                fail={
                    "power": NVMLError_NotSupported,
                    "power_limit": NVMLError_NotSupported,
                    "util": NVMLError_NoPermission,
                    "procs": NVMLError_NoPermission,
                },
            )
        ]
    )
    d = NvmlSource(session_with(lib)).read().devices[0]
    assert d.values["used"] == 1000 and d.values["temperature_c"] == 40  # the rest still read
    for k in ("power_w", "power_limit_w"):
        assert d.values[k] is None and "not supported" in d.unavailable[k]
    for k in ("util_gpu", "util_memory", "process_used"):
        assert d.values[k] is None and "permission" in d.unavailable[k]


def test_r37_mig_gpu_blanks_whole_gpu_memory_and_utilisation() -> None:
    d = NvmlSource(session_with(FakeNvmlLib([gpu(0, mig=True)]))).read().devices[0]
    assert d.info["mig"] is True
    for k in ("used", "total", "util_gpu", "util_memory", "process_used"):
        assert d.values[k] is None and "MIG" in d.unavailable[k]
    assert d.values["temperature_c"] == 40


def test_r37_container_pid_not_listed_is_na_only_with_a_context() -> None:
    lib = FakeNvmlLib([gpu(0, procs=[(1, 2048)])])  # another PID namespace: we are not listed
    src = NvmlSource(session_with(lib), pid=4242)
    d = src.read().devices[0]
    assert d.values["process_used"] == 0  # no CUDA context here: truly nothing on the GPU
    src.has_context = lambda: True
    src._proc_at = -1e18  # let the next read query the processes again
    d = src.read().devices[0]
    assert d.values["process_used"] is None and "container" in d.unavailable["process_used"]


def test_r36_running_processes_query_is_rate_limited() -> None:
    lib = FakeNvmlLib([gpu(0)])
    now = [0.0]
    src = NvmlSource(session_with(lib), pid=4242, clock=lambda: now[0])
    for _ in range(20):  # 10 s of the poller's 2 Hz
        src.read()
        now[0] += 0.5
    assert NvmlSource.PROCESS_EVERY_S == 5.0
    assert lib.calls.count("procs") == 2  # at 0 s and 5 s
    assert lib.calls.count("memory") == 20


# --- mapping torch devices to NVML devices (R38) ---------------------------------------------

NV = [
    {"index": 0, "uuid": "GPU-aaaa1111-0000-0000-0000-000000000000"},
    {"index": 1, "uuid": "GPU-bbbb2222-0000-0000-0000-000000000000"},
    {"index": 2, "uuid": "GPU-cccc3333-0000-0000-0000-000000000000"},
]


def pairs(ms: list) -> list[tuple[int, int | None, str | None]]:
    return [(m.torch_index, m.nvml_index, m.matched_by) for m in ms]


def test_r38_reordered_indices_follow_visible_devices() -> None:
    ms = map_devices(NV, visible="2,0", order="PCI_BUS_ID")
    assert pairs(ms) == [(0, 2, "visible_devices"), (1, 0, "visible_devices")]
    # Without PCI_BUS_ID order CUDA may sort by speed: the match is flagged as assumed.
    assert {m.matched_by for m in map_devices(NV, visible="2,0", order=None)} == {"assumed_order"}


def test_r38_uuid_form_and_prefixes() -> None:
    ms = map_devices(NV, visible="GPU-cccc3333,GPU-aaaa1111-0000-0000-0000-000000000000")
    assert pairs(ms) == [(0, 2, "uuid"), (1, 0, "uuid")]
    assert ms[0].uuid == NV[2]["uuid"]


def test_r38_list_ends_at_first_invalid_or_repeated_entry() -> None:
    assert pairs(map_devices(NV, visible="1,7,0", order="PCI_BUS_ID")) == [
        (0, 1, "visible_devices")
    ]
    assert pairs(map_devices(NV, visible="1,1,0", order="PCI_BUS_ID")) == [
        (0, 1, "visible_devices")
    ]
    assert map_devices(NV, visible="GPU-dead", order=None) == []
    assert map_devices(NV, visible="", order=None) == []
    assert pairs(map_devices(NV, visible="-1,0", order=None)) == []


def test_r38_unset_visible_devices_lists_all() -> None:
    assert pairs(map_devices(NV, visible=None, order="PCI_BUS_ID")) == [
        (0, 0, "pci_order"),
        (1, 1, "pci_order"),
        (2, 2, "pci_order"),
    ]


def test_r38_once_cuda_is_initialised_torch_uuids_decide() -> None:
    # The environment says "0,1" but CUDA ordered the devices differently: UUIDs win.
    torch_uuids = [
        "GPU-bbbb2222-0000-0000-0000-000000000000",
        "cccc3333-0000-0000-0000-000000000000",
    ]
    ms = map_devices(NV, visible="0,1", order=None, torch_uuids=torch_uuids)
    assert pairs(ms) == [(0, 1, "uuid"), (1, 2, "uuid")]
    ms = map_devices(NV, visible=None, torch_uuids=["MIG-1234", None])
    assert pairs(ms) == [(0, None, None), (1, None, None)]


def test_mig_instance_in_visible_devices_has_no_nvml_match() -> None:
    ms = map_devices(NV, visible="MIG-aaaa-bbbb,1", order="PCI_BUS_ID")
    assert pairs(ms) == [(0, None, None), (1, 1, "visible_devices")]


# --- the allocator source never initialises CUDA (R02) ---------------------------------------


def test_r02_allocator_source_reads_nothing_before_cuda_init(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    touched: list[str] = []
    for fn in ("device_count", "get_device_properties", "memory_stats", "mem_get_info", "init"):
        monkeypatch.setattr(torch.cuda, fn, lambda *a, _n=fn, **k: touched.append(_n))
    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda: touched.append("_lazy_init"))
    r = TorchAllocatorSource().read()
    assert r.available is False and "no CUDA support" in (r.reason or "")
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # as if this were a CUDA build
    r = TorchAllocatorSource().read()
    assert r.available is False and "not initialised" in (r.reason or "")
    r = TorchAllocatorSource(lambda: "CUDA context is corrupted").read()
    assert r.reason == "CUDA context is corrupted"
    assert touched == [] and not torch.cuda.is_initialized()


def test_allocator_source_reads_nested_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    stats = {
        "allocated_bytes": {"all": {"current": 100, "peak": 300}},
        "reserved_bytes": {"all": {"current": 512}},
        "active_bytes": {"all": {"current": 120}},
        "inactive_split_bytes": {"all": {"current": 20}},
        "num_alloc_retries": 2,
        "num_ooms": 1,
    }
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda.memory, "memory_stats_as_nested_dict", lambda i: stats)
    props = SimpleNamespace(name="Fake", uuid="1234-5678", total_memory=1 << 30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    r = TorchAllocatorSource().read()
    (d,) = r.devices
    assert d.values == {
        "allocated": 100,
        "reserved": 512,
        "peak": 300,
        "active": 120,
        "inactive_split": 20,
        "alloc_retries": 2,
        "ooms": 1,
    }
    assert d.info == {"name": "Fake", "uuid": "GPU-1234-5678", "total": 1 << 30}


# --- host and recording ----------------------------------------------------------------------


def test_host_rss_is_a_plausible_number() -> None:
    rss, why = HostSource().rss()
    assert why is None and rss is not None and 10 * 2**20 < rss < 64 * 2**30


def test_recorded_source_replays_then_repeats_the_last() -> None:
    a = Reading(True, None, [DeviceReading(0, {"allocated": 1})])
    b = Reading(False, "gone")
    src = RecordedSource("allocator", [a, b])
    assert [src.read() for _ in range(3)] == [a, b, b] and src.calls == 3
    with pytest.raises(ValueError):
        RecordedSource("nvml", [])
