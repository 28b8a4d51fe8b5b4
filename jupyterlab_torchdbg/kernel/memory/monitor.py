"""The memory monitor: samples, the ``memory`` status message, the OOM autopsy trigger.

Three places feed it, each with its own rule:

- the training thread, after every optimizer step (``after_step``, from the step
  boundary): the allocator's counters at most every ``SAMPLE_INTERVAL_S`` (host-side, no
  sync), a breakdown when its measured cost fits ``BREAKDOWN_BUDGET``, and any action
  waiting for a safe point (``save_checkpoint`` while a cell trains);
- IPython's cell events: a sample when a cell starts and ends, a fresh breakdown and a
  status at the end, and the OOM autopsy / sticky-error detection when the cell failed;
- the poller thread (``POLL_INTERVAL_S``): NVML, the RSS and the rate-limited status
  (poller.py); NVML and /proc only, never torch or CUDA (R36); it stops on unload (R01).

Numbers that stream (allocated / reserved / peak / interval peak (peaks.py) /
inactive-split per device, NVML used, RSS) go into ``series`` messages under ``mem/``,
recorded while a cell runs. The ``memory`` message (status.py) is sent when it changes, at
most every ``STATUS_BUSY_S`` while a cell runs and ``STATUS_IDLE_S`` when idle.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...protocol import jsonable
from ..oom_text import sticky_cuda_error
from ..safe_point import JobT, SafePointJobs
from ..watches import watches
from . import autopsy
from . import breakdown as bd
from .activations import ActivationMeter
from .leak import LeakWatch
from .peaks import IntervalPeaks
from .poller import Poller
from .recording import HistoryRecorder
from .sources import (
    DeviceInfo,
    DeviceMapping,
    HostSource,
    MemorySource,
    NvmlSource,
    Reading,
    TorchAllocatorSource,
    map_devices,
)
from .status import ALLOCATOR_SERIES, memory_message
from .step_threads import StepThreads

if TYPE_CHECKING:
    import torch

    from ...protocol.messages import MemoryBreakdown
    from ..host import Host

SAMPLE_INTERVAL_S = 0.1
POLL_INTERVAL_S = 0.5
STATUS_BUSY_S = 0.5
STATUS_IDLE_S = 1.0
BREAKDOWN_MIN_S = 2.0
#: Share of wall time the breakdown may take while training (it walks every tensor).
BREAKDOWN_BUDGET = 0.005
#: A cell-end breakdown costing more than this waits for its budgeted slot instead.
BREAKDOWN_CELL_END_S = 0.05
#: How long an action waits for the running cell's next optimizer step.
SAFE_POINT_TIMEOUT_S = 60.0

CORRUPTED = (
    "CUDA context is corrupted — restart the kernel. A sticky CUDA error ({kind}) happened "
    "earlier in this session; until the restart nothing can use or free GPU memory."
)


class MemoryMonitor:
    def __init__(
        self,
        ext: Host,
        *,
        exception_id: Callable[[int | None], str | None] = lambda count: None,
        allocator: MemorySource | None = None,
        nvml: MemorySource | None = None,
        host: HostSource | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.ext = ext
        #: The ``exception`` message's id of a cell execution (the autopsy links to it).
        self.exception_id = exception_id
        self.corrupted: str | None = None
        self.allocator: MemorySource = allocator or TorchAllocatorSource(lambda: self.corrupted)
        if nvml is None:
            real = NvmlSource(ext.nvml)
            real.has_context = lambda: self.cuda_seen
            nvml = real
        self.nvml: MemorySource = nvml
        self.host = host or HostSource()
        self._clock, self._wall = clock, wall
        self._send_lock = threading.Lock()
        #: Threads running a cell now (main shell, subshells: a probe cell on a subshell
        #: must not end the training cell's "running" state).
        self._running: set[int] = set()
        #: Optimizers seen stepping, and which thread steps each (R34).
        self.steppers = StepThreads()
        self.alloc_reading: Reading | None = None
        self.nvml_reading: Reading | None = None
        self.rss: int | None = None
        self.rss_reason: str | None = None
        self.breakdown: MemoryBreakdown | None = None
        self.last_oom: dict[str, object] | None = None
        self.oom_count = 0
        self.recorder = HistoryRecorder(self.cuda_unusable)
        self.peaks, self.activations = IntervalPeaks(), ActivationMeter(self)
        self.jobs = SafePointJobs()
        self._next_sample = self._next_breakdown = 0.0
        self._sent_at = -1e18
        self._sent_key: str | None = None
        #: This process has a CUDA context (the poller reads this, never torch, R36).
        self.cuda_seen = False
        #: The poller thread (set by ``attach``; tests stop it to drive ``poll_once``).
        self.poller: Poller | None = None
        self.leak = LeakWatch(self)  # leaks named while they grow; the guard (leak/)

    # --- cells and CUDA state ------------------------------------------------------------

    @property
    def in_cell(self) -> bool:
        """A cell is running on some thread."""
        return bool(self._running)

    @in_cell.setter
    def in_cell(self, running: bool) -> None:
        if running:
            self._running.add(threading.get_ident())
        else:
            self._running.clear()

    def cuda_unusable(self) -> str | None:
        """Why CUDA must not be touched now (None: it may, if initialised)."""
        return self.corrupted

    def mark_corrupted(self, kind: str) -> None:
        self.corrupted = CORRUPTED.format(kind=kind.replace("_", " "))

    # --- the training thread ------------------------------------------------------------

    def after_step(self, optimizer: torch.optim.Optimizer) -> None:
        """After ``optimizer.step()``: cheap unless a sample, breakdown or job is due."""
        try:
            self.steppers.saw(optimizer)
            if self.jobs.waiting:
                self.jobs.run()
            now = self._clock()
            if now >= self._next_sample:
                self._next_sample = now + SAMPLE_INTERVAL_S
                self.sample_allocator()
            if now >= self._next_breakdown:
                self.update_breakdown()
            self.leak.at_step(optimizer)
            self.ext.stream.maybe_flush()
        except Exception:
            self.ext.count_error("memory:step")

    def sample_allocator(self) -> Reading:
        """Read the allocator counters and record one row per device (no sync)."""
        r = self.allocator.read()
        self.alloc_reading = r
        if r.available:
            self.cuda_seen = True
            self.peaks.update(r)
            x = self._wall()
            stream = self.ext.stream
            for d in r.devices:
                row = [float(d.values.get(k) or 0) for k in ALLOCATOR_SERIES]
                stream.block([f"mem/cuda:{d.index}/{k}" for k in ALLOCATOR_SERIES]).record(row, x)
        return r

    def found(self) -> bd.Found:
        try:
            watched = [(w.model, w.optimizer) for w in watches()[1]]
        except Exception:
            watched = []
        ns = getattr(self.ext.shell, "user_ns", None)
        return bd.discover(ns, watched=watched, seen_optimizers=self.steppers.optimizers())

    def update_breakdown(self) -> MemoryBreakdown:
        r = self.alloc_reading
        allocated: dict[str, int | None] = {}
        if r is not None and r.available:
            for d in r.devices:
                v = d.values.get("allocated")
                allocated[f"cuda:{d.index}"] = int(v) if v is not None else None
        rss, _ = self.host.rss()
        b = bd.compute(self.found(), allocated=allocated, rss=rss, own=self.steppers.readable())
        if b.get("skipped_grads"):
            b["note"] = (
                "training runs on several threads: gradients and optimizer state of models "
                "stepped on other threads are not counted (reading them during their "
                "backward() is unsafe)"
            )
        b["time"] = round(self._wall(), 3)
        self.breakdown = b
        cost = b["cost_ms"] / 1000.0
        self._next_breakdown = self._clock() + max(BREAKDOWN_MIN_S, cost / BREAKDOWN_BUDGET)
        return b

    # --- safe points (R12) -----------------------------------------------------------------

    def at_safe_point(self, fn: Callable[[], JobT], timeout: float = SAFE_POINT_TIMEOUT_S) -> JobT:
        """Run ``fn`` now when no cell runs (or on the main thread), else on the training
        thread at its next optimizer step or at the end of the cell."""
        if not (self._running - {threading.get_ident()}):
            return fn()  # no cell runs elsewhere (or this is the cell's own thread)
        return self.jobs.run_at_next(fn, timeout)

    def run_jobs(self) -> None:
        self.jobs.run()

    # --- IPython's cell events -----------------------------------------------------------

    def pre_run_cell(self, info: object = None) -> None:
        try:
            self._running.add(threading.get_ident())
            self.sample_allocator()
            self._record_rss(self.host.rss()[0])
        except Exception:
            self.ext.count_error("memory:pre_run_cell")

    def post_run_cell(self, result: object = None) -> None:
        try:
            self._running.discard(threading.get_ident())
            exc = getattr(result, "error_in_exec", None)
            if isinstance(exc, BaseException):
                self._after_error(exc, result)
            del exc
            if not self._running:
                # Jobs wait for the training cell; a probe cell ending on a subshell
                # while the main shell trains must not run them mid-step.
                self.run_jobs()
            self.sample_allocator()
            rss, self.rss_reason = self.host.rss()
            self.rss = rss
            self._record_rss(rss)
            last = self.breakdown
            if self._running:
                pass  # another cell trains: reading its p.grad here races its backward()
            elif last is None or last.get("cost_ms", 0) <= BREAKDOWN_CELL_END_S * 1000:
                self.update_breakdown()
            elif self._clock() >= self._next_breakdown:
                self.update_breakdown()
            self.ext.stream.flush()
            self.publish(immediate=True)
        except Exception:
            self.ext.count_error("memory:post_run_cell")

    def _after_error(self, exc: BaseException, result: object) -> None:
        try:
            text = str(exc)
        except Exception:
            text = ""
        kind = sticky_cuda_error(text) if isinstance(text, str) else None
        if kind is not None:
            self.mark_corrupted(kind)  # before anything below could touch CUDA (R22)
            return
        facts = autopsy.oom_facts(exc)
        if facts is None:
            return
        info = getattr(result, "info", None)
        self.capture_oom(
            exc,
            facts,
            execution_count=getattr(result, "execution_count", None),
            cell_id=getattr(info, "cell_id", None),
        )

    def capture_oom(
        self,
        exc: BaseException,
        facts: dict[str, object],
        *,
        execution_count: object = None,
        cell_id: object = None,
    ) -> dict[str, object]:
        """Build, keep and broadcast the ``oom`` autopsy; arm activations (CUDA)."""
        rss, _ = self.host.rss()
        summary = getattr(self.allocator, "summary", None)
        body = autopsy.build(
            exc,
            facts,
            ns=getattr(self.ext.shell, "user_ns", None),
            allocator=self.allocator,
            found=self.found(),
            rss=rss,
            summary=summary if callable(summary) else None,
            own=self.steppers.readable(),
        )
        self.oom_count += 1
        count = execution_count if isinstance(execution_count, int) else None
        msg = {
            "method": "oom",
            "id": f"{self.ext.session_id[:12]}-oom-{self.oom_count}",
            "time": round(self._wall(), 3),
            "replay": False,
            "execution_count": count,
            "cell_id": cell_id if isinstance(cell_id, str) and cell_id else None,
            "exception_id": self.exception_id(count),
            **body,
        }
        self.last_oom = jsonable(msg)
        if msg.get("device") != "cpu":
            self.activations.after_oom()
        self.ext.hub.broadcast(self.last_oom)
        return self.last_oom

    # --- the poller thread (R36: NVML and /proc only) ---------------------------------------

    def poll_once(self) -> None:
        nv = self.nvml.read()
        rss, why = self.host.rss()
        self.nvml_reading, self.rss, self.rss_reason = nv, rss, why
        if self.in_cell:
            x = self._wall()
            if nv.available:
                for m in self.mapping():
                    d = nv.device(m.nvml_index) if m.nvml_index is not None else None
                    used = d.values.get("used") if d is not None else None
                    if used is not None:
                        name = f"mem/cuda:{m.torch_index}/nvml_used"
                        self.ext.stream.record(name, float(used), x, per_run=False)
            self._record_rss(rss, x)
        self.publish()

    def _record_rss(self, rss: int | None, x: float | None = None) -> None:
        if rss is not None:  # not a log() series: no part in runs
            self.ext.stream.record("mem/cpu/rss", float(rss), x or self._wall(), per_run=False)

    # --- devices -------------------------------------------------------------------------

    def nvml_devices(self) -> list[DeviceInfo]:
        devices = getattr(self.nvml, "devices", None)
        if callable(devices):
            return list(devices())
        r = self.nvml_reading
        return r.identities() if r is not None else []

    def mapping(self) -> list[DeviceMapping]:
        r = self.alloc_reading
        torch_uuids = (
            [d.info.get("uuid") for d in r.devices] if r is not None and r.available else None
        )
        return map_devices(
            self.nvml_devices(),
            visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
            order=os.environ.get("CUDA_DEVICE_ORDER"),
            torch_uuids=torch_uuids,
        )

    # --- the status message --------------------------------------------------------------

    def status(self) -> dict[str, object]:
        """The ``memory`` message (status.py)."""
        return memory_message(self)

    def publish(self, immediate: bool = False) -> None:
        """Broadcast the status if it changed; rate-limited unless ``immediate``."""
        if self.ext.hub.count == 0:
            return
        now = self._clock()
        gap = STATUS_BUSY_S if self.in_cell else STATUS_IDLE_S
        if not immediate and now - self._sent_at < gap:
            return
        msg = jsonable(self.status())
        key = json.dumps({k: v for k, v in msg.items() if k != "time"}, sort_keys=True)
        with self._send_lock:
            if key == self._sent_key:
                return
            self._sent_key, self._sent_at = key, now
        self.ext.hub.broadcast(msg)

    def snapshot_messages(self) -> list[dict[str, object]]:
        """For a panel that (re)connects: the current status, and the last autopsy replayed."""
        if not self.in_cell and threading.current_thread() is threading.main_thread():
            try:
                self.update_breakdown()  # idle kernel: fresh numbers are safe to compute
            except Exception:
                self.ext.count_error("memory:breakdown")
        out = [self.status()]
        if self.last_oom is not None:
            out.append({**self.last_oom, "replay": True})
        return out

    def after_action(self) -> None:
        """After empty_cache / release_refs: a fresh sample in the timeline and the status."""
        if not self.in_cell:
            self.sample_allocator()
        self.rss, self.rss_reason = self.host.rss()
        self._sent_key = None
        self.publish(immediate=True)
