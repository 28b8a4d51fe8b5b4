"""When a worker's agent reports: what it takes of the kernel's ``config`` in a large
world (its ``rows`` and heartbeat intervals and its row stride: ranks/kernel/scale.py
asks for them), when a hang's heartbeat goes at once, which reports carry the layer
names (``LayerNames``), and whether the training thread waits inside torch (the
``torch_wait`` phase)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import FrameType
from typing import TYPE_CHECKING

from ..wire.messages import MAX_ROW_STRIDE

if TYPE_CHECKING:
    from ..wire.messages import Layers

#: The longest ``rows`` / heartbeat interval a kernel's ``config`` may ask for (s).
MAX_INTERVAL_S = 10.0


def take_cadence(
    config: Mapping[str, object], intervals: dict[str, float], lows: dict[str, float]
) -> int | None:
    """Set ``intervals`` (``rows_s``, ``heartbeat_s``) from ``config`` within
    [``lows[name]``, ``MAX_INTERVAL_S``] (the kernel then waits three of them before
    calling a rank lost; not numbers: ignored); return the row stride asked (a step row
    only every so many steps: a power of two up to 64, the boundary's sampling stride
    never falls below it), or None when none is asked or it is not one of those."""
    for name, low in lows.items():
        value = config.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            intervals[name] = min(MAX_INTERVAL_S, max(low, float(value)))
    stride = config.get("row_stride")
    if isinstance(stride, int) and not isinstance(stride, bool):
        if 1 <= stride <= MAX_ROW_STRIDE and stride & (stride - 1) == 0:
            return stride
    return None


def newly_hung(since: float | None, hang_s: float, step: int, said_at: int | None) -> bool:
    """Whether the heartbeat of a hang goes now: the training thread has not stepped for
    ``hang_s`` (``since``) and no such heartbeat went at this step (``said_at``)."""
    return since is not None and since >= hang_s and said_at != step


#: A report carries its layer names at least once in this many (the kernel may have
#: lost the one that did: a full receive queue).
NAMES_EVERY = 16


class LayerNames:
    """Which reports carry the layer names: the first of each layout, the first after
    ``forget`` (a ``hello``, a reconnection: the kernel may be a new one), after a send
    that failed, and one in ``NAMES_EVERY``; the others name only their ``layout``."""

    def __init__(self) -> None:
        self.known: str | None = None  # the layout whose names the kernel was sent
        self.since = 0  # reports without names since

    def forget(self) -> None:
        self.known = None

    def outgoing(self, layers: Layers | None) -> tuple[Layers | None, str | None]:
        """The layers to send, and their layout to pass to ``sent`` when they carry the
        names."""
        layout = None if layers is None else layers.get("layout")
        if layers is None or layout is None or "names" not in layers:
            return layers, None
        if layout == self.known and self.since < NAMES_EVERY - 1:
            self.since += 1
            unnamed = layers.copy()
            del unnamed["names"]
            return unnamed, None
        return layers, layout

    def sent(self, layout: str | None, ok: bool) -> None:
        if layout is not None:
            self.known, self.since = (layout, 0) if ok else (None, 0)


#: Where the training thread waits for the other ranks: torch.distributed, autograd
#: (DDP's hooks), nn.parallel.
WAIT_DIRS = tuple(
    f"{sep}torch{sep}{d}{sep}" for sep in {"/", os.sep} for d in ("distributed", "autograd")
) + tuple(f"{sep}torch{sep}nn{sep}parallel{sep}" for sep in {"/", os.sep})


def waits_in_torch(frame: FrameType | None) -> bool:
    """Whether a frame of this stack (innermost first) is in one of ``WAIT_DIRS``."""
    while frame is not None:
        if any(d in frame.f_code.co_filename for d in WAIT_DIRS):
            return True
        frame = frame.f_back
    return False
