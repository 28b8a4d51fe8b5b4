"""``map_devices``: pair torch's ``cuda:N`` with NVML devices by UUID (R38).

Honours ``CUDA_VISIBLE_DEVICES`` in index or UUID form; a device that cannot be paired
says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .reading import DeviceInfo


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
    nvml_devices: Sequence[DeviceInfo],
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
    by_uuid = {_norm_uuid(u): d for d in nvml_devices if (u := d.get("uuid"))}
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
