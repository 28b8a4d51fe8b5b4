"""Extension lifecycle: ``%load_ext`` / ``%unload_ext`` and the one live instance.

R01: loading twice keeps one instance; ``%reload_ext`` unloads then loads; unload runs
every cleanup registered with ``add_cleanup`` in reverse order, so each hook, event
callback and comm target is removed and whatever was there before is back.
R11: ``count_error`` is how every hook reports a failure it caught.

Features that need torch (gradient hooks, memory sampling) register with ``on_torch``;
they attach when the extension loads if torch is already imported, else the moment the
user's ``import torch`` finishes (even mid-cell; see torch_import.py). Loading never imports
torch itself.
"""

from __future__ import annotations

import importlib
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from .actions import ActionRegistry, no_args, only_keys, string_list
from .capabilities import Nvml, capabilities
from .comms import CommHub
from .features import FEATURE_MODULES
from .stream import Stream
from .torch_import import TorchImportWatcher

_current: Extension | None = None
_lock = threading.Lock()

Attach = Callable[["Extension"], Callable[[], None] | None]


def current() -> Extension | None:
    """The loaded extension, or None."""
    return _current


class Extension:
    """Everything the kernel side holds while loaded."""

    def __init__(self, shell: Any, comm_manager: Any) -> None:
        self.shell = shell
        self.session_id = uuid.uuid4().hex
        self.errors: Counter[str] = Counter()
        self.nvml = Nvml()
        self.hub = CommHub(self, comm_manager)
        self.stream = Stream(self.hub.broadcast)
        self.actions = ActionRegistry(self.count_error)
        self._cleanups: list[Callable[[], None]] = []
        self._torch_attached = False
        self._torch_features: list[Attach] = []
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

    def on_torch(self, attach: Attach) -> None:
        """Call ``attach(self)`` once torch is imported (now, or at a later cell boundary).

        Its return value, if callable, is run on unload.
        """
        self._torch_features.append(attach)
        if self._torch_attached:
            self._attach_one(attach)

    def capabilities(self) -> dict[str, Any]:
        return capabilities(self.shell, self.nvml)

    def stats(self) -> dict[str, Any]:
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
        self.add_cleanup(self.nvml.shutdown)
        for name in FEATURE_MODULES:
            self._attach_one(importlib.import_module(name).attach)
        if "torch" not in sys.modules:
            self.add_cleanup(TorchImportWatcher(self._on_torch_imported).install())
        self._maybe_attach_torch()

    def _on_torch_imported(self) -> None:
        try:
            self._maybe_attach_torch()
        except Exception:
            self.count_error("attach:torch")

    def stop(self) -> None:
        for fn in reversed(self._cleanups):
            try:
                fn()
            except Exception:
                self.count_error("unload")
        self._cleanups.clear()

    def _maybe_attach_torch(self) -> None:
        if self._torch_attached or "torch" not in sys.modules:
            return
        self._torch_attached = True
        for attach in list(self._torch_features):
            self._attach_one(attach)
        # torch arrived after the panels connected: tell them the new capabilities.
        if self.hub.count:
            self.hub.broadcast(self.hub.hello(True))

    def _attach_one(self, attach: Attach) -> None:
        try:
            cleanup = attach(self)
        except Exception:
            self.count_error(f"attach:{getattr(attach, '__module__', 'feature')}")
            return
        if callable(cleanup):
            self.add_cleanup(cleanup)

    # --- IPython events ------------------------------------------------------------

    def _pre_run_cell(self, info: Any = None) -> None:
        self._cells.add(threading.get_ident())
        try:
            self._maybe_attach_torch()
        except Exception:
            self.count_error("pre_run_cell")

    def _post_run_cell(self, result: Any = None) -> None:
        self._cells.discard(threading.get_ident())
        try:
            self._maybe_attach_torch()
            self.stream.flush()
        except Exception:
            self.count_error("post_run_cell")

    # --- actions -------------------------------------------------------------------

    def _action_snapshot(self, args: dict[str, Any]) -> dict[str, Any]:
        self.hub.resend_snapshot()  # to the requesting comm only, with the name table
        return {"series": len(self.stream.names())}

    def _action_clear_history(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"cleared": self.stream.clear(args.get("names"))}


def _clear_args(args: dict[str, Any]) -> dict[str, Any]:
    only_keys(args, {"names"})
    names = string_list(args, "names")
    return {} if names is None else {"names": names}


def _comm_manager(shell: Any) -> Any:
    kernel = getattr(shell, "kernel", None)
    manager = getattr(kernel, "comm_manager", None)
    if manager is None:
        import comm

        manager = comm.get_comm_manager()
    return manager


def load(shell: Any, comm_manager: Any = None) -> Extension:
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


def unload(shell: Any = None) -> None:
    global _current
    with _lock:
        ext, _current = _current, None
    if ext is not None:
        ext.stop()
