"""CUDA and host memory: live timeline, breakdown, OOM autopsy, and the memory actions.

Files: ``sources`` (torch allocator, NVML, host RSS, a recorded fake; device mapping by
UUID), ``breakdown`` (parameters / gradients / optimizer state / everything else),
``autopsy`` (what filled the memory when a cell died of OOM, and the remedies that fit),
``recording`` (memory-history start/stop and the top allocation sites),
``action_args`` / ``action_handlers`` (``empty_cache``, ``release_refs``,
``record_memory``, ``save_checkpoint``, ``set_memory_guard``; ``measure_activations`` is
``activations``), ``peaks`` (the peak of each sampling interval), ``leak`` (leaks named
while they grow, the limit, the guard), ``monitor`` (sampling, the OOM trigger),
``status`` (the ``memory`` message), ``poller`` (the NVML / RSS thread),
``step_threads`` (which thread steps which optimizer: what this thread may read); actions that
wait for the training thread use ``kernel/safe_point.py``.

``attach(host, exception_id)`` registers the actions and the snapshot part and starts the
poller thread; the step boundary calls ``MemoryMonitor.after_step`` and ``extension.py``
the cell events. Nothing here imports torch or initialises CUDA (R02). Every
registration is undone on unload (R01).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..action_args import no_args
from .action_args import validate_checkpoint, validate_record
from .action_handlers import MemoryActions
from .leak import validate_guard
from .monitor import POLL_INTERVAL_S, MemoryMonitor
from .poller import Poller

if TYPE_CHECKING:
    from ..host import Host

__all__ = ["MemoryMonitor", "attach"]


def attach(
    host: Host, exception_id: Callable[[int | None], str | None]
) -> tuple[MemoryMonitor, Callable[[], None]]:
    """Create the monitor, register its actions and start its poller; returns it and its
    cleanup. ``exception_id`` links an OOM autopsy to the ``exception`` of the same cell."""
    mon = MemoryMonitor(host, exception_id=exception_id)
    handlers = MemoryActions(mon)
    removers: list[Callable[[], None]] = [
        host.actions.register("empty_cache", no_args, handlers.empty_cache),
        host.actions.register("release_refs", no_args, handlers.release_refs),
        host.actions.register("record_memory", validate_record, handlers.record_memory),
        host.actions.register("save_checkpoint", validate_checkpoint, handlers.save_checkpoint),
        host.actions.register("measure_activations", no_args, mon.activations.action),
        host.actions.register("set_memory_guard", validate_guard, mon.leak.act_set_guard),
        host.hub.add_snapshot_part(mon.snapshot_messages),
    ]
    poller = Poller(mon.poll_once, POLL_INTERVAL_S, lambda: host.count_error("memory:poll"))
    mon.poller = poller
    removers.append(poller.start())
    removers.append(mon.recorder.shutdown)
    removers.append(mon.activations.cancel)
    removers.append(mon.leak.close)

    def cleanup() -> None:
        for remove in reversed(removers):
            try:
                remove()
            except Exception:
                host.count_error("memory:unload")
        # A waiting save_checkpoint must not hang past unload.
        mon.run_jobs()

    return mon, cleanup
