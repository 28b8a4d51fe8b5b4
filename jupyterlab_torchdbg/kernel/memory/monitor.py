"""The memory monitor: samples, the ``memory`` status message, the OOM autopsy trigger.

Three places feed it, each with its own rule:

- the training thread, at every optimizer step boundary (a global step post-hook): the
  allocator's counters at most every ``SAMPLE_INTERVAL_S`` (host-side reads, no sync), a
  breakdown when its self-measured cost fits ``BREAKDOWN_BUDGET``, and any action waiting
  for a safe point (``save_checkpoint`` while a cell trains);
- IPython's cell events: a sample when a cell starts and ends, a fresh breakdown and a
  status at the end, and the OOM autopsy / sticky-error detection when the cell failed;
- the poller thread (``POLL_INTERVAL_S``, ≤ 2 Hz): NVML and the process RSS, and the
  rate-limited status broadcast. It reads NVML and /proc only; it never touches torch,
  tensors or CUDA (R36), and it stops on unload (R01).

Numbers that stream (allocated / reserved / peak / inactive-split per device, NVML used,
RSS) go into the ordinary ``series`` messages under ``mem/``, x = Unix time in seconds;
series are recorded while a cell runs (the idle kernel does not fill the history). The
``memory`` message (device cards, breakdown, recording state) is small JSON, sent when it
changes, at most every ``STATUS_BUSY_S`` while a cell runs and ``STATUS_IDLE_S`` when idle.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...protocol import jsonable
from ..actions import ActionError
from ..exceptions import current_monitor as exception_monitor
from ..exceptions.diagnose.memory import sticky_cuda_error
from . import autopsy
from . import breakdown as bd
from .recording import HistoryRecorder
from .sources import (
    ALLOCATOR_FIELDS,
    NVML_FIELDS,
    DeviceMapping,
    HostSource,
    MemorySource,
    NvmlSource,
    Reading,
    TorchAllocatorSource,
    map_devices,
)

if TYPE_CHECKING:
    from ..extension import Extension

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
ALLOCATOR_SERIES = ("allocated", "reserved", "peak", "inactive_split")


@dataclass
class _Job:
    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class Poller:
    """A daemon thread calling ``fn`` every ``interval`` seconds until ``stop``."""

    def __init__(self, fn: Callable[[], None], interval: float, on_error: Callable[[], None]):
        self._fn = fn
        self._interval = interval
        self._on_error = on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="torchdbg-memory", daemon=True)

    def start(self) -> Callable[[], None]:
        self._thread.start()
        return self.stop

    def _run(self) -> None:
        # The first poll right away: the cards have NVML numbers before the first cell.
        while not self._stop.is_set():
            try:
                self._fn()
            except Exception:
                self._on_error()
            if self._stop.wait(self._interval):
                break

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


class MemoryMonitor:
    def __init__(
        self,
        ext: Extension,
        *,
        allocator: MemorySource | None = None,
        nvml: MemorySource | None = None,
        host: HostSource | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.ext = ext
        self.corrupted: str | None = None
        self.allocator: MemorySource = allocator or TorchAllocatorSource(lambda: self.corrupted)
        if nvml is None:
            real = NvmlSource(ext.nvml)
            real.has_context = lambda: self.cuda_seen
            nvml = real
        self.nvml: MemorySource = nvml
        self.host = host or HostSource()
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        #: Threads running a cell now (the main shell, and subshells on ipykernel >= 7:
        #: a probe cell on a subshell must not end the training cell's "running" state).
        self._running: set[int] = set()
        self.optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        #: The thread that last stepped each optimizer, and the threads other than the
        #: main one that step optimizers (training on several threads, R34).
        self._owner: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._step_threads: set[int] = set()
        self.alloc_reading: Reading | None = None
        self.nvml_reading: Reading | None = None
        self.rss: int | None = None
        self.rss_reason: str | None = None
        self.breakdown: dict[str, Any] | None = None
        self.last_oom: dict[str, Any] | None = None
        self.oom_count = 0
        self.recorder = HistoryRecorder(self.cuda_unusable)
        self._jobs: list[_Job] = []
        self._next_sample = 0.0
        self._next_breakdown = 0.0
        self._sent_at = -1e18
        self._sent_key: str | None = None
        self.torch_attached = False
        #: This process has a CUDA context (seen by the training/main thread; the poller
        #: reads this flag rather than ask torch, R36).
        self.cuda_seen = False
        #: The poller thread (set by ``attach``; tests stop it to drive ``poll_once``).
        self.poller: Poller | None = None

    # --- torch ------------------------------------------------------------------------

    def attach_torch(self, ext: Extension) -> Callable[[], None]:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        handle = register_optimizer_step_post_hook(self.on_step)
        self.torch_attached = True

        def remove() -> None:
            handle.remove()
            self.torch_attached = False

        return remove

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

    def on_step(self, optimizer: Any, args: Any = None, kwargs: Any = None) -> None:
        """Optimizer step post-hook: cheap unless a sample, breakdown or job is due."""
        try:
            tid = threading.get_ident()
            try:
                if optimizer not in self.optimizers:
                    self.optimizers.add(optimizer)
                if self._owner.get(optimizer) != tid:
                    self._owner[optimizer] = tid
            except TypeError:
                pass  # an optimizer without weakref support is found by name only (R24)
            if tid not in self._step_threads and tid != threading.main_thread().ident:
                self._step_threads.add(tid)
            if self._jobs:
                self.run_jobs()
            now = self._clock()
            if now >= self._next_sample:
                self._next_sample = now + SAMPLE_INTERVAL_S
                self.sample_allocator()
            if now >= self._next_breakdown:
                self.update_breakdown()
            self.ext.stream.maybe_flush()
        except Exception:
            self.ext.count_error("memory:step")

    def sample_allocator(self) -> Reading:
        """Read the allocator counters and record one row per device (no sync)."""
        r = self.allocator.read()
        self.alloc_reading = r
        if r.available:
            self.cuda_seen = True
            x = self._wall()
            stream = self.ext.stream
            for d in r.devices:
                row = [float(d.values.get(k) or 0) for k in ALLOCATOR_SERIES]
                stream.block([f"mem/cuda:{d.index}/{k}" for k in ALLOCATOR_SERIES]).record(row, x)
        return r

    def found(self) -> bd.Found:
        watched: list[tuple[Any, Any]] = []
        try:
            from ..grads.naming import watches

            watched = [(w.model, w.optimizer) for w in watches()[1]]
        except Exception:
            watched = []
        ns = getattr(self.ext.shell, "user_ns", None)
        return bd.discover(ns, watched=watched, seen_optimizers=list(self.optimizers))

    def update_breakdown(self) -> dict[str, Any]:
        r = self.alloc_reading
        allocated: dict[str, int | None] = {}
        if r is not None and r.available:
            for d in r.devices:
                v = d.values.get("allocated")
                allocated[f"cuda:{d.index}"] = int(v) if v is not None else None
        rss, _ = self.host.rss()
        b = bd.compute(self.found(), allocated=allocated, rss=rss, own=self._own_predicate())
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

    def _own_predicate(self) -> Callable[[Any], bool] | None:
        """None while training runs on the main thread only (everything may be read);
        otherwise what this thread may read: its own optimizers and their parameters (R34).

        Another thread may be inside ``backward()`` at any moment, writing ``p.grad`` of
        its parameters: reading that from here is a data race inside torch that can crash
        the process. Threads that ended no longer count.
        """
        if self._step_threads:
            alive = {t.ident for t in threading.enumerate()}
            self._step_threads &= alive
        if not self._step_threads:
            return None
        me = threading.get_ident()
        mine: set[int] = set()
        for opt, tid in list(self._owner.items()):
            if tid == me:
                mine.add(id(opt))
                for g in getattr(opt, "param_groups", []):
                    mine.update(id(p) for p in g.get("params", []))
        return lambda obj: id(obj) in mine

    # --- safe points (R12) -----------------------------------------------------------------

    def at_safe_point(self, fn: Callable[[], Any], timeout: float = SAFE_POINT_TIMEOUT_S) -> Any:
        """Run ``fn`` now when no cell runs (or on the main thread), else on the training
        thread at its next optimizer step or at the end of the cell."""
        if not (self._running - {threading.get_ident()}):
            return fn()  # no cell runs elsewhere (or this is the cell's own thread)
        job = _Job(fn)
        with self._lock:
            self._jobs.append(job)
        if not job.done.wait(timeout):
            with self._lock:
                pending = job in self._jobs
                if pending:
                    self._jobs.remove(job)
            if pending:
                raise ActionError(
                    f"the running cell reached no optimizer step in {timeout:.0f} s; "
                    "try again when it ends",
                    "refused",
                )
            job.done.wait()  # it is running right now: wait for it
        if job.error is not None:
            raise job.error
        return job.result

    def run_jobs(self) -> None:
        with self._lock:
            jobs, self._jobs = self._jobs, []
        for job in jobs:
            try:
                job.result = job.fn()
            except BaseException as e:  # handed to the waiting action, never raised here
                job.error = e
            finally:
                job.done.set()

    # --- IPython's cell events -----------------------------------------------------------

    def pre_run_cell(self, info: Any = None) -> None:
        try:
            self._running.add(threading.get_ident())
            self.sample_allocator()
            self._record_rss(self.host.rss()[0])
        except Exception:
            self.ext.count_error("memory:pre_run_cell")

    def post_run_cell(self, result: Any = None) -> None:
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

    def _after_error(self, exc: BaseException, result: Any) -> None:
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
        facts: dict[str, Any],
        *,
        execution_count: Any = None,
        cell_id: Any = None,
    ) -> dict[str, Any]:
        """Build, keep (strings only) and broadcast the ``oom`` autopsy."""
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
            own=self._own_predicate(),
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
            "exception_id": self._exception_id(count),
            **body,
        }
        self.last_oom = jsonable(msg)
        self.ext.hub.broadcast(self.last_oom)
        return self.last_oom

    def _exception_id(self, execution_count: int | None) -> str | None:
        """The id of the ``exception`` message for the same failure, so the exception
        panel links to this autopsy. The exception monitor's post_run_cell ran before ours
        (it attaches first)."""
        monitor = exception_monitor()
        return monitor.exception_id(execution_count) if monitor is not None else None

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
                        self.ext.stream.record(name, float(used), x)
            self._record_rss(rss, x)
        self.publish()

    def _record_rss(self, rss: int | None, x: float | None = None) -> None:
        if rss is not None:
            self.ext.stream.record("mem/cpu/rss", float(rss), self._wall() if x is None else x)

    # --- devices -------------------------------------------------------------------------

    def nvml_devices(self) -> list[dict[str, Any]]:
        devices = getattr(self.nvml, "devices", None)
        if callable(devices):
            return list(devices())
        r = self.nvml_reading
        if r is None or not r.available:
            return []
        return [{"index": d.index, **d.info} for d in r.devices]

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

    def _state(self, mapping: list[DeviceMapping]) -> tuple[str, str | None]:
        if self.corrupted:
            return "corrupted", self.corrupted
        torch = sys.modules.get("torch")
        if torch is None:
            return "waiting", "torch is not imported yet"
        r = self.alloc_reading
        if r is not None and r.available:
            return "active", None
        if not getattr(getattr(torch, "version", None), "cuda", None):
            return "no_cuda", "no CUDA device: this torch build is CPU-only"
        if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "" or (
            self.nvml_devices() == [] and self._nvml_available()
        ):
            return "no_cuda", "no CUDA device visible to this kernel"
        why = "CUDA is not initialised yet: allocator numbers appear once your code uses it"
        if not self._nvml_available():
            why += f"; {self._nvml_reason() or 'NVML unavailable'}"
        return "cuda_idle", why

    def _nvml_available(self) -> bool:
        r = self.nvml_reading
        return bool(r is not None and r.available)

    def _nvml_reason(self) -> str | None:
        r = self.nvml_reading
        if r is None:
            return "NVML not read yet"
        return r.reason

    def status(self) -> dict[str, Any]:
        mapping = self.mapping()
        state, reason = self._state(mapping)
        alloc = self.alloc_reading
        nv = self.nvml_reading
        by_nvml = {d["index"]: d for d in self.nvml_devices()}
        devices = []
        for m in mapping:
            a = alloc.device(m.torch_index) if alloc is not None and alloc.available else None
            n = None
            if nv is not None and nv.available and m.nvml_index is not None:
                n = nv.device(m.nvml_index)
            static = by_nvml.get(m.nvml_index, {}) if m.nvml_index is not None else {}
            name = (a.info.get("name") if a else None) or static.get("name")
            dev = f"cuda:{m.torch_index}"
            entry: dict[str, Any] = {
                "device": dev,
                "index": m.torch_index,
                "name": name,
                "uuid": m.uuid,
                "nvml_index": m.nvml_index,
                "matched_by": m.matched_by,
                "mig": static.get("mig"),
                "series": {
                    **{k: f"mem/{dev}/{k}" for k in ALLOCATOR_SERIES},
                    "nvml_used": f"mem/{dev}/nvml_used",
                },
                "allocator": {k: a.values.get(k) for k in ALLOCATOR_FIELDS} if a else None,
                "allocator_reason": None
                if a is not None
                else (alloc.reason if alloc is not None else "not sampled yet"),
                "nvml": {k: n.values.get(k) for k in NVML_FIELDS} if n is not None else None,
                "nvml_reason": None if n is not None else self._device_nvml_reason(m),
                "unavailable": dict(n.unavailable) if n is not None else {},
            }
            devices.append(entry)
        nvml_ok = self._nvml_available()
        return {
            "method": "memory",
            "time": round(self._wall(), 3),
            "state": state,
            "reason": reason,
            "devices": devices,
            "host": {"rss": self.rss, "reason": self.rss_reason, "series": "mem/cpu/rss"},
            "breakdown": self.breakdown,
            "recording": self.recorder.status(),
            "last_oom": None
            if self.last_oom is None
            else {
                "id": self.last_oom["id"],
                "time": self.last_oom["time"],
                "device": self.last_oom["device"],
                "headline": self.last_oom["headline"],
            },
            "nvml": {
                "available": nvml_ok,
                "reason": None if nvml_ok else self._nvml_reason(),
            },
        }

    def _device_nvml_reason(self, m: DeviceMapping) -> str:
        if not self._nvml_available():
            return self._nvml_reason() or "NVML unavailable"
        if m.nvml_index is None:
            return "no NVML device matches this device's UUID (a MIG instance?)"
        return "NVML has no reading for this device"

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

    def snapshot_messages(self) -> list[dict[str, Any]]:
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
        rss, self.rss_reason = self.host.rss()
        self.rss = rss
        self._sent_key = None
        self.publish(immediate=True)
