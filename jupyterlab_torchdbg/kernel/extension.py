"""Extension lifecycle: ``%load_ext`` / ``%unload_ext``, the one live instance, the wiring.

R01: loading twice keeps one instance; ``%reload_ext`` unloads then loads; unload runs
every cleanup registered with ``add_cleanup`` in reverse order, so each hook, event
callback and comm target is removed and whatever was there before is back.
R11: ``count_error`` is how every hook reports a failure it caught.

``Extension.start`` is where the features are put together, explicitly: each is created
with what it needs of the others as arguments (control's "clipping is on" for the
gradient monitor, the exception monitor's ids for the memory autopsy), the step boundary
gets gradients, control and memory in its fixed order (step_boundary.py), and the cell
events call the features in the order written in ``_pre_run_cell`` / ``_post_run_cell``.
Features see the extension only as a ``Host`` (host.py) and never import this module.

The step boundary attaches when the extension loads if torch is already imported, else
the moment the user's ``import torch`` finishes (even mid-cell; see torch_import.py).
Loading never imports torch itself.
"""

from __future__ import annotations

import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from .. import ranks
from ..protocol import jsonable
from . import control, exceptions, export, grads, memory, record
from .action_args import no_args, only_keys, string_list
from .action_registry import ActionRegistry
from .capabilities import Nvml, capabilities
from .comm_types import CommManager
from .comms import CommHub, Deliver
from .runs import Runs, name_of
from .shell_status import MainShellBusy
from .step_boundary import StepBoundary
from .stream import Stream
from .torch_import import TorchImportWatcher

if TYPE_CHECKING:
    from ..protocol import messages as m
    from ..ranks.kernel.aggregator import RankHub
    from .host import Shell

_current: Extension | None = None
_lock = threading.Lock()


def current() -> Extension | None:
    """The loaded extension, or None."""
    return _current


class Extension:
    """Everything the kernel side holds while loaded."""

    def __init__(self, shell: Shell, comm_manager: CommManager) -> None:
        self.shell = shell
        self.session_id = uuid.uuid4().hex
        self.errors: Counter[str] = Counter()
        self.nvml = Nvml()
        self.actions = ActionRegistry(self.count_error)
        #: JupyterLab's kernel status kept "busy" while a cell runs (shell_status.py).
        self.shell_busy = MainShellBusy(getattr(shell, "kernel", None), self.count_error)
        self.hub = CommHub(
            comm_manager,
            hello=self._hello_fields,
            handle_action=self.actions.handle,
            snapshot=self._write_snapshot,
            on_error=self.count_error,
            after_request=self.shell_busy.after_request,
        )
        self.stream = Stream(self.hub.broadcast)
        #: The runs (runs.py): the step boundary, log() and the cell events feed it.
        self.runs = Runs(self.hub.broadcast, self.count_error)
        self._cleanups: list[Callable[[], None]] = []
        self._torch_attached = False
        self.exceptions: exceptions.ExceptionMonitor | None = None
        self.control: control.Control | None = None
        self.grads: grads.GradMonitor | None = None
        self.memory: memory.MemoryMonitor | None = None
        #: Worker processes (ranks) of multi-process jobs started from the notebook.
        self.ranks: RankHub | None = None
        self.record: record.Recorder | None = None
        self.boundary: StepBoundary | None = None
        #: Threads running a cell now (the main shell; subshells on ipykernel >= 7).
        self._cells: set[int] = set()

    def others_running(self) -> bool:
        """A cell runs on another thread (e.g. a probe cell on a subshell ends while the
        main shell trains): cell-end work that reads the training state must wait for
        the training cell's own end (reading p.grad during its backward() races)."""
        return bool(self._cells - {threading.get_ident()})

    # --- helpers for capabilities ----------------------------------------------------

    def count_error(self, site: str) -> None:
        """Record an error caught inside the tool (never re-raised into user code)."""
        self.errors[site] += 1

    def add_cleanup(self, fn: Callable[[], None]) -> None:
        self._cleanups.append(fn)

    def capabilities(self) -> dict[str, object]:
        return capabilities(self.shell, self.nvml)

    def _hello_fields(self) -> dict[str, object]:
        return {
            "capabilities": self.capabilities(),
            "session_id": self.session_id,
            "actions": self.actions.names(),
        }

    def _write_snapshot(self, deliver: Deliver) -> None:
        stream = self.stream

        def send(blocks: list[m.SnapshotBlock], buffers: list[memoryview], seq: int) -> None:
            header: m.Snapshot = {
                "method": "snapshot",
                "seq": seq,
                "blocks": blocks,
                "stats": jsonable(self.stats()),
            }
            if stream.ignored_series:
                header["truncated"] = True
            deliver(header, buffers)

        stream.send_snapshot(send)

    def stats(self) -> dict[str, object]:
        return {
            "messages": self.stream.messages,
            "points": self.stream.points,
            "errors": dict(self.errors),
        }

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        events = self.shell.events
        events.register("pre_run_cell", self._pre_run_cell)
        self.add_cleanup(lambda: events.unregister("pre_run_cell", self._pre_run_cell))
        events.register("post_run_cell", self._post_run_cell)
        self.add_cleanup(lambda: events.unregister("post_run_cell", self._post_run_cell))
        self.add_cleanup(self.actions.register("snapshot", no_args, self._action_snapshot))
        self.add_cleanup(
            self.actions.register("clear_history", _clear_args, self._action_clear_history)
        )
        self.hub.register()
        self.add_cleanup(self.hub.close)
        self._wire_runs()
        self.add_cleanup(self.nvml.shutdown)
        # The features, each given what it needs of the others (no feature reaches another).
        self.exceptions, cleanup = exceptions.attach(self)
        self.add_cleanup(cleanup)
        self.control, cleanup = control.attach(self)
        self.add_cleanup(cleanup)
        self.grads, cleanup = grads.attach(self, clipping=lambda: self._clipping())
        self.add_cleanup(cleanup)
        self.memory, cleanup = memory.attach(self, exception_id=self.exceptions.exception_id)
        self.add_cleanup(cleanup)
        # A loop held paused sits at a safe point: the actions that wait for one run there.
        self.control.serve_while_held = [self.memory.run_jobs, self.grads.replayer.run_pending]
        self.memory.leak.wire(self.control, self.grads.alerts)  # the guard pauses; alerts
        # The activation meter re-runs the gradient monitor's kept forward calls (R53).
        guard, meter = self.grads.guard, self.memory.activations
        meter.rerun_forward = partial(grads.rerun_kept_forward, lambda: guard.keeper)
        # The run record (issue #24): its ``record`` snapshot part follows ``runs``.
        self.record, cleanup = record.attach(self, record.monitor_facts(self.memory))
        self.add_cleanup(cleanup)
        # Runs as TensorBoard files: this kernel's from the stream, earlier ones from the record.
        exporter = export.attach(
            self, alerts=self.grads.alerts.snapshot, load_record_run=self.record.load_run
        )
        self.add_cleanup(exporter)
        # After runs (its ``ranks`` snapshot part follows ``runs``); never raises.
        self.ranks, cleanup = ranks.attach_to(self)
        self.add_cleanup(cleanup)
        self.boundary = StepBoundary(
            self.grads,
            self.control,
            self.memory,
            self.count_error,
            runs=self.runs,
            name_of=lambda o: name_of(o, self.shell.user_ns),
        )
        # Removed before the features' own cleanups run (cleanups run in reverse).
        self.add_cleanup(self.boundary.detach)
        if "torch" not in sys.modules:
            self.add_cleanup(TorchImportWatcher(self._on_torch_imported).install())
        self._maybe_attach_torch()
        self._guarded("runs", self._adopt_running_cell)
        # Last: a panel told "loaded" opens its comm at once (it reattaches after an
        # %unload_ext / %load_ext typed by hand, issue #22).
        self.hub.announce(self.session_id)

    def _adopt_running_cell(self) -> None:
        """``%load_ext`` ran inside a cell: that cell's pre_run_cell came before our
        handler was registered. Take it as started now, so a run it starts has its cell
        and ``In[n]`` and ends with it (its post_run_cell reaches us)."""
        kernel = getattr(self.shell, "kernel", None)
        get_parent = getattr(kernel, "get_parent", None)
        if get_parent is None:
            return  # not inside a kernel's execute request (a plain IPython, the tests' shell)
        parent = get_parent("shell")
        if not isinstance(parent, dict) or parent.get("msg_type") != "execute_request":
            return
        content = parent.get("content")
        if not isinstance(content, dict) or content.get("silent"):
            return  # the panel's silent auto-load: IPython sends it no cell events
        metadata = parent.get("metadata")
        cell_id = metadata.get("cellId") if isinstance(metadata, dict) else None
        count = self._prompt_count() if content.get("store_history", True) else None
        self._cells.add(threading.get_ident())
        self.shell_busy.cell_started()
        self.runs.cell_started(cell_id if isinstance(cell_id, str) else None, count)

    def _prompt_count(self) -> int | None:
        """The running cell's ``In[n]``. IPython counts the cell before pre_run_cell
        (``execution_count`` is already n + 1 then); its display hook knows which n the
        prompt shows, whatever the IPython version."""
        count = getattr(getattr(self.shell, "displayhook", None), "prompt_count", None)
        if not isinstance(count, int):
            count = getattr(self.shell, "execution_count", None)
        return count if isinstance(count, int) else None

    def _wire_runs(self) -> None:
        """Runs: sent right after the snapshot; a new run gives the stream new blocks."""
        runs, stream = self.runs, self.stream

        def on_run(event: str, run: object) -> None:
            if event == "start":
                stream.start_run(runs.current_id or 0)
            elif event == "end":
                stream.end_run()

        self.add_cleanup(runs.on_change(on_run))
        self.add_cleanup(self.hub.add_snapshot_part(lambda: [runs.message()]))
        stream.on_no_run = runs.at_log
        runs.activity = lambda: stream.logged
        stream.on_step_back = runs.step_backwards
        self.add_cleanup(runs.close)

    def _clipping(self) -> bool:
        return self.control is not None and self.control.clipping

    def _on_torch_imported(self) -> None:
        try:
            self._maybe_attach_torch()
        except Exception:
            self.count_error("attach:torch")
        if self.ranks is not None:  # the workers' launch patch (one watcher per kernel)
            self._guarded("ranks:torch", self.ranks.torch_imported)

    def stop(self) -> None:
        for fn in reversed(self._cleanups):
            try:
                fn()
            except Exception:
                self.count_error("unload")
        self._cleanups.clear()

    def _maybe_attach_torch(self) -> None:
        if self._torch_attached or "torch" not in sys.modules or self.boundary is None:
            return
        self._torch_attached = True
        try:
            self.boundary.attach()
        except Exception:
            self.count_error("attach:torch")
        # torch arrived after the panels connected: tell them the new capabilities.
        if self.hub.count:
            self.hub.broadcast(self.hub.hello(True))

    # --- IPython events ------------------------------------------------------------

    def _pre_run_cell(self, info: object = None) -> None:
        """A cell starts: torch may have arrived; models updated by hand get their
        end-of-backward hooks (not while another cell runs: it may be inside backward);
        then exceptions, memory and ranks (the cell that starts a job)."""
        self._cells.add(threading.get_ident())
        self.shell_busy.cell_started()
        cell_id = getattr(info, "cell_id", None)
        self.runs.cell_started(cell_id if isinstance(cell_id, str) else None, self._prompt_count())
        self._guarded("pre_run_cell", self._maybe_attach_torch)
        if not self.others_running():
            self.scan_models()
        if self.exceptions is not None:
            self._guarded("exceptions:pre_run_cell", self.exceptions.pre_run_cell, info)
        if self.memory is not None:
            self._guarded("memory:pre_run_cell", self.memory.pre_run_cell, info)
        if self.ranks is not None and self.ranks.cell_events is not None:
            self._guarded("ranks:pre_run_cell", self.ranks.cell_events[0], info)

    def _post_run_cell(self, result: object = None) -> None:
        """A cell ended. The order matters:

        1. exceptions first: the failed cell's ``exception`` message exists before the
           memory autopsy looks up its id, and before ranks (a job's cell that failed:
           its workers' exceptions follow the cell's own);
        2. gradients and control (only when no other cell still runs: a probe cell ending
           on a subshell while the main shell trains must not read the training thread's
           gradients or alarm state mid-backward): the last rows, alerts, refusals;
        3. memory (its own rule for other running cells; it runs waiting jobs);
        4. the stream's last points.
        """
        self._cells.discard(threading.get_ident())
        self.shell_busy.cell_ended()
        self._guarded("post_run_cell", self._maybe_attach_torch)
        if self.exceptions is not None:
            self._guarded("exceptions:post_run_cell", self.exceptions.post_run_cell, result)
        if self.ranks is not None and self.ranks.cell_events is not None:
            self._guarded("ranks:post_run_cell", self.ranks.cell_events[1], result)
        if not self.others_running():
            if self.grads is not None:
                self._guarded("grads:post_run_cell", self.grads.post_run_cell)
            if self.control is not None:
                self._guarded("control", self.control.post_run_cell)
        if self.memory is not None:
            self._guarded("memory:post_run_cell", self.memory.post_run_cell, result)
        self._guarded("post_run_cell", self.stream.flush)
        if self.boundary is not None and not self.others_running():
            self.boundary.look.on = False  # a backward outside a cell looks for nothing
        self._guarded("runs", self.runs.cell_ended)  # the run this cell started ends

    def scan_models(self) -> None:
        """Hook the namespace's (or the watched) models that no optimizer steps, at the
        end of their backward passes (step_boundary.py); also called by ``watch()``.
        Never raises (R11)."""
        try:
            if self.boundary is not None:
                self.boundary.scan_models(self.shell.user_ns)
        except Exception:
            self.count_error("backward:scan")

    def _guarded(self, site: str, fn: Callable[..., object], *args: object) -> None:
        try:
            fn(*args)
        except Exception:
            self.count_error(site)

    # --- actions -------------------------------------------------------------------

    def _action_snapshot(self, args: dict[str, object]) -> dict[str, object]:
        self.hub.resend_snapshot()  # to the requesting comm only, with the name table
        return {"series": len(self.stream.names())}

    def _action_clear_history(self, args: dict[str, object]) -> dict[str, object]:
        names = args.get("names")  # a list of strings (_clear_args)
        return {"cleared": self.stream.clear(names if isinstance(names, list) else None)}


def _clear_args(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"names"})
    names = string_list(args, "names")
    return {} if names is None else {"names": names}


def _comm_manager(shell: object) -> CommManager:
    """The kernel's comm manager (ipykernel's, else ``comm``'s): its comms are ``Comm``s,
    though ``comm`` annotates their payloads more loosely (plain dicts, bytes)."""
    kernel = getattr(shell, "kernel", None)
    manager = getattr(kernel, "comm_manager", None)
    if manager is None:
        import comm

        manager = comm.get_comm_manager()
    return cast("CommManager", manager)


def load(shell: Shell, comm_manager: CommManager | None = None) -> Extension:
    """Load once per kernel; a second load is a no-op returning the live instance."""
    global _current
    with _lock:
        if _current is not None:
            return _current
        ext = Extension(shell, comm_manager if comm_manager is not None else _comm_manager(shell))
        try:
            ext.start()
        except Exception:
            ext.stop()
            raise
        _current = ext
        return ext


def unload(shell: object = None) -> None:
    global _current
    with _lock:
        ext, _current = _current, None
    if ext is not None:
        ext.stop()
