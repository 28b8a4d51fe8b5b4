"""CUDA and host memory: live timeline, breakdown, OOM autopsy, and the memory actions.

Files: ``sources`` (torch allocator, NVML, host RSS, a recorded fake; device mapping by
UUID), ``breakdown`` (parameters / gradients / optimizer state / everything else),
``autopsy`` (what filled the memory when a cell died of OOM, and the remedies that fit),
``recording`` (memory-history start/stop and the top allocation sites), ``actions``
(``empty_cache``, ``release_refs``, ``record_memory``, ``save_checkpoint``), ``monitor``
(sampling, the ``memory`` status message, the poller thread).

``attach(ext)`` registers the actions, the cell events and the snapshot part, starts the
poller thread, and asks ``ext.on_torch`` for the optimizer step post-hook; nothing here
imports torch or initialises CUDA (R02). Every registration is undone on unload (R01).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..actions import no_args
from .actions import MemoryActions, validate_checkpoint, validate_record
from .monitor import POLL_INTERVAL_S, MemoryMonitor, Poller

if TYPE_CHECKING:
    from ..extension import Extension

__all__ = ["MemoryMonitor", "attach", "current_monitor"]

_monitor: MemoryMonitor | None = None


def current_monitor() -> MemoryMonitor | None:
    """The loaded extension's memory monitor, or None."""
    return _monitor


def attach(ext: Extension) -> Callable[[], None]:
    global _monitor
    mon = MemoryMonitor(ext)
    handlers = MemoryActions(mon)
    removers: list[Callable[[], None]] = [
        ext.actions.register("empty_cache", no_args, handlers.empty_cache),
        ext.actions.register("release_refs", no_args, handlers.release_refs),
        ext.actions.register("record_memory", validate_record, handlers.record_memory),
        ext.actions.register("save_checkpoint", validate_checkpoint, handlers.save_checkpoint),
        ext.hub.add_snapshot_part(mon.snapshot_messages),
    ]
    events = ext.shell.events
    events.register("pre_run_cell", mon.pre_run_cell)
    events.register("post_run_cell", mon.post_run_cell)

    def unregister_events() -> None:
        for name, cb in (("pre_run_cell", mon.pre_run_cell), ("post_run_cell", mon.post_run_cell)):
            try:
                events.unregister(name, cb)
            except ValueError:
                pass

    removers.append(unregister_events)
    ext.on_torch(mon.attach_torch)
    poller = Poller(mon.poll_once, POLL_INTERVAL_S, lambda: ext.count_error("memory:poll"))
    mon.poller = poller
    removers.append(poller.start())
    removers.append(mon.recorder.shutdown)
    _monitor = mon

    def cleanup() -> None:
        global _monitor
        for remove in reversed(removers):
            try:
                remove()
            except Exception:
                ext.count_error("memory:unload")
        # A waiting save_checkpoint must not hang past unload.
        mon.run_jobs()
        if _monitor is mon:
            _monitor = None

    return cleanup
