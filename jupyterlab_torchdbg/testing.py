"""Fakes of IPython's shell and of Jupyter comms, for the tests and the benchmark.

``loaded_extension`` loads the real extension in this process (``extension.load``)
against a minimal shell (IPython events + a namespace) and a comm manager whose comms
count messages and bytes and serialise headers to JSON as a real comm would. Nothing is
sent anywhere, so the benchmark measures production code and most tests need no kernel.

In the style of ipywidgets' DummyComm: a ``FakeComm`` made with ``record=True`` keeps
every message, and ``validate`` checks each one (the tests pass the protocol schema's
validator). Every comm keeps the panel's name table (block id -> names, from
``snapshot`` messages and from the ``names`` a ``series`` block carries the first time),
so it counts points exactly as the panel decodes them, and flags a block it could not
have decoded (R05, R06).

Shipped beside the package (the benchmark runs from an installed wheel) but imported by
nothing the extension loads; it never imports torch.
"""

from __future__ import annotations

import json
import numbers
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .protocol import COMM_TARGET, PROTOCOL_VERSION

if TYPE_CHECKING:
    from .kernel.exceptions import ExceptionMonitor
    from .kernel.extension import Extension
    from .kernel.grads import GradMonitor
    from .kernel.memory import MemoryMonitor


class FakeEvents:
    """IPython's ``shell.events``: register, unregister, trigger."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[..., object]]] = {
            "pre_run_cell": [],
            "post_run_cell": [],
        }

    def register(self, name: str, cb: Callable[..., object]) -> None:
        self.callbacks.setdefault(name, []).append(cb)

    def unregister(self, name: str, cb: Callable[..., object]) -> None:
        self.callbacks[name].remove(cb)

    def trigger(self, name: str, *args: object) -> None:
        for cb in list(self.callbacks.get(name, [])):
            cb(*args)


class CellResult:
    """What IPython passes to ``post_run_cell`` for a cell that succeeded."""

    error_in_exec = None
    error_before_exec = None
    execution_count = 1


@dataclass
class FakeShell:
    """The part of an IPython shell the extension uses."""

    user_ns: dict[str, object] = field(default_factory=dict)
    events: FakeEvents = field(default_factory=FakeEvents)
    kernel: object = None
    last_execution_result: object = None

    def run_cell_end(self) -> None:
        """What IPython does when a cell finishes (post_run_cell with a result)."""
        self.events.trigger("post_run_cell", CellResult())


class FakeCommManager:
    """Holds the comm target the extension registers."""

    def __init__(self) -> None:
        self.targets: dict[str, Callable[..., object]] = {}

    def register_target(self, name: str, fn: Callable[..., object]) -> None:
        self.targets[name] = fn

    def unregister_target(self, name: str, fn: Callable[..., object]) -> None:
        self.targets.pop(name, None)

    def open(self, comm: FakeComm, protocol_version: str = PROTOCOL_VERSION) -> FakeComm:
        """Open ``comm`` to the extension's target, as a panel does."""
        data = {"method": "open", "protocol_version": protocol_version}
        self.targets[COMM_TARGET](comm, {"content": {"data": data}})
        return comm


class FakeComm:
    """Counts what would go over the wire; checks ``series`` sequence numbers.

    ``record``: keep every ``(data, buffers)`` in ``sent``. ``validate``: called with each
    message before it is counted (it may raise).
    """

    def __init__(
        self,
        *,
        record: bool = False,
        validate: Callable[[Mapping[str, object]], None] | None = None,
        comm_id: str | None = None,
    ) -> None:
        self.comm_id = comm_id or uuid.uuid4().hex
        self.record = record
        self._validate = validate
        self.sent: list[tuple[Mapping[str, object], list[bytes]]] = []
        self.messages_sent = 0
        self.series_messages = 0
        self.bytes = 0
        self.points = 0
        self.gaps = 0
        self.send_s = 0.0
        #: The panel's name table: block id -> names.
        self.names: dict[int, list[str]] = {}
        #: ``series`` blocks whose id this comm had no names for (undecodable).
        self.unknown_blocks = 0
        self._seq: int | None = None
        self._on_msg: Callable[[dict[str, object]], object] | None = None
        self._closed = False

    def send(
        self, data: Mapping[str, object], buffers: Sequence[bytes | memoryview] | None = None
    ) -> None:
        t0 = time.perf_counter()
        if self._validate is not None:
            self._validate(data)
        # what the kernel's session does with the header (jupyter_client's json_default
        # turns numpy/torch scalars into numbers; anything else unknown fails there too)
        text = json.dumps(data, default=_json_default)
        size = len(text) + sum(len(memoryview(b).cast("B")) for b in buffers or [])
        self.messages_sent += 1
        self.bytes += size
        method = data.get("method")
        if method == "snapshot":
            self.names = {message_int(b["id"]): _names(b["names"]) for b in message_blocks(data)}
            self._seq = message_int(data["seq"])
        elif method == "series":
            self.series_messages += 1
            seq = message_int(data["seq"])
            if self._seq is not None and seq != self._seq + 1:
                self.gaps += 1
            self._seq = seq
            for b in message_blocks(data):
                block = message_int(b["id"])
                if "names" in b:
                    self.names[block] = _names(b["names"])
                names = self.names.get(block)
                if names is None:
                    self.unknown_blocks += 1
                else:
                    self.points += message_int(b["count"]) * len(names)
        if self.record:
            self.sent.append((data, [bytes(b) for b in buffers or []]))
        self.send_s += time.perf_counter() - t0

    def on_msg(self, fn: Callable[[dict[str, object]], object]) -> None:
        self._on_msg = fn

    def on_close(self, fn: Callable[[dict[str, object]], object]) -> None:
        pass

    def close(self) -> None:
        self._closed = True

    def deliver(self, data: Mapping[str, object]) -> None:
        """A message from the panel to the kernel side (as ``comm_msg`` content data)."""
        if self._on_msg is None:
            raise TypeError("no on_msg handler: the extension has not opened this comm")
        self._on_msg({"content": {"data": data}})


def message_blocks(data: Mapping[str, object]) -> list[dict[str, object]]:
    """A ``snapshot`` / ``series`` message's blocks (objects, else TypeError)."""
    blocks = data["blocks"]
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        raise TypeError("blocks: not a list of objects")
    return blocks


def _names(x: object) -> list[str]:
    """A block's ``names`` (strings, else TypeError)."""
    if not isinstance(x, list) or not all(isinstance(n, str) for n in x):
        raise TypeError("names: not a list of strings")
    return x


def message_int(x: object) -> int:
    """``int(x)`` of a message's number (anything else: TypeError, as ``int`` raises)."""
    if isinstance(x, (int, float, str)):
        return int(x)
    raise TypeError(f"not a number: {type(x).__name__}")


def _json_default(o: object) -> int | float:
    if isinstance(o, numbers.Integral):
        return int(o)
    if isinstance(o, numbers.Real):
        return float(o)
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


@dataclass
class Loaded:
    """The extension loaded by ``loaded_extension``, with its fake shell and first panel."""

    ext: Extension
    shell: FakeShell
    comm: FakeComm
    manager: FakeCommManager

    def end_cell(self) -> None:
        self.shell.run_cell_end()


@contextmanager
def loaded_extension(
    user_ns: dict[str, object] | None = None, comm: FakeComm | None = None
) -> Iterator[Loaded]:
    """Load the extension in-process with one fake panel attached; always unload.

    ``user_ns`` is the shell's namespace (the same dict, not a copy); ``comm`` the
    panel's comm (default: a counting one). torch must already be imported for the
    gradient monitor to attach.
    """
    from .kernel import extension

    if extension.current() is not None:
        raise RuntimeError("the extension is already loaded in this process")
    shell, manager = FakeShell(user_ns if user_ns is not None else {}), FakeCommManager()
    ext = extension.load(shell, manager)
    try:
        panel = manager.open(comm if comm is not None else FakeComm())
        yield Loaded(ext, shell, panel, manager)
    finally:
        extension.unload(shell)


def loaded() -> Extension:
    """The extension loaded in this process (by ``loaded_extension`` or a kernel's
    ``%load_ext``): its features as ``extension.py`` wired them. No feature keeps a
    module-level instance of itself; a test reaches one through the extension that owns it.
    """
    from .kernel import extension

    ext = extension.current()
    if ext is None:
        raise RuntimeError("the extension is not loaded in this process")
    return ext


def grad_monitor() -> GradMonitor:
    """The loaded extension's gradient monitor."""
    mon = loaded().grads
    if mon is None:
        raise RuntimeError("the extension has no gradient monitor")
    return mon


def memory_monitor() -> MemoryMonitor:
    """The loaded extension's memory monitor."""
    mon = loaded().memory
    if mon is None:
        raise RuntimeError("the extension has no memory monitor")
    return mon


def exception_monitor() -> ExceptionMonitor:
    """The loaded extension's exception monitor."""
    mon = loaded().exceptions
    if mon is None:
        raise RuntimeError("the extension has no exception monitor")
    return mon
