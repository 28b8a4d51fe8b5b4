"""What every memory source returns: a ``Reading`` of per-device numbers.

Each field is either a number or missing with a reason in ``unavailable`` (R03, R37):
the panel always says why a number is n/a. The monitor and the autopsy only see
readings, so CPU tests drive them with a ``RecordedSource``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypedDict

Number = int | float


class DeviceInfo(TypedDict, total=False):
    """A device's identity: NVML's static fields (index, name, uuid, mig) or torch's
    properties (name, uuid, total bytes)."""

    index: int
    name: str | None
    uuid: str | None
    mig: bool | None
    total: int | None


@dataclass
class DeviceReading:
    """One device's numbers. ``values[k] is None`` means n/a, with ``unavailable[k]``."""

    index: int
    values: dict[str, Number | None] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    #: Identity: name, uuid, mig, ... (strings and booleans).
    info: DeviceInfo = field(default_factory=lambda: DeviceInfo())


@dataclass
class Reading:
    """What a source saw at one moment. ``available`` False: ``reason`` says why."""

    available: bool
    reason: str | None = None
    devices: list[DeviceReading] = field(default_factory=list)

    def device(self, index: int) -> DeviceReading | None:
        return next((d for d in self.devices if d.index == index), None)

    def identities(self) -> list[DeviceInfo]:
        """Each device's identity with its index (none when unavailable)."""
        if not self.available:
            return []
        return [{"index": d.index, **d.info} for d in self.devices]


class MemorySource(Protocol):
    """A reader of per-device memory numbers. ``read`` never raises."""

    kind: str

    def read(self) -> Reading: ...
