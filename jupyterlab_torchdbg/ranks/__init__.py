"""Multi-process training (issue #15): worker processes (ranks) stream to the kernel.

Two sides share this package. Worker processes import only what they need of it
(``wire``, ``worker``, ``boot``: no IPython, no kernel side), so this module imports
nothing at all. The kernel side is ``attach.attach_to`` (called by ``kernel/extension.py``
on load): the endpoint, the hub that merges workers into jobs (``aggregator``, ``job``)
and sees how their processes ended (``exits``), the alarms, the all-rank actions, the
panel's ``ranks`` and ``exception`` messages.
See PROTOCOL.md "Ranks".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..kernel.host import Host
    from .kernel.aggregator import RankHub


def attach_to(host: Host) -> tuple[RankHub, Callable[[], None]]:
    """The kernel side, wired into the loaded extension (never raises; see attach.py)."""
    from .kernel.attach import attach_to as attach

    return attach(host)
