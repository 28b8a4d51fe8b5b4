"""Multi-process training (issue #15): worker processes (ranks) stream to the kernel.

Three subpackages. ``worker`` runs in the worker processes (its step boundary, reads,
agent thread, and ``worker/boot``, the sitecustomize the processes the notebook starts
import); ``wire`` is the signed transport and message format both sides share;
``kernel`` is the kernel side. Workers import only ``worker`` and ``wire`` (no IPython,
no kernel side), so this module imports nothing at all. The kernel side is wired in by
``attach_to`` below (``kernel/attach.py``, called by ``kernel/extension.py`` on load):
the endpoint, the hub that merges workers into jobs (``kernel/aggregator.py``,
``kernel/job.py``, ``kernel/rank.py``) and sees how their processes ended
(``kernel/exits.py``), the alarms, the all-rank actions, the panel's ``ranks`` and
``exception`` messages. See PROTOCOL.md "Ranks".
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
