"""The real extension, loaded in this process against a counting comm.

The benchmark measures production code: ``extension.load`` with a minimal shell (IPython
events + a namespace) and a comm manager whose comm counts messages and bytes and
serialises headers to JSON as a real comm would. Nothing is sent anywhere.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..protocol import COMM_TARGET, PROTOCOL_VERSION


class _Events:
    def __init__(self) -> None:
        self.callbacks: dict[str, list[Any]] = {}

    def register(self, name: str, cb: Any) -> None:
        self.callbacks.setdefault(name, []).append(cb)

    def unregister(self, name: str, cb: Any) -> None:
        self.callbacks.get(name, []).remove(cb)

    def trigger(self, name: str, *args: Any) -> None:
        for cb in list(self.callbacks.get(name, [])):
            cb(*args)


class _Shell:
    def __init__(self) -> None:
        self.user_ns: dict[str, Any] = {}
        self.events = _Events()
        self.kernel = None


class _CellResult:
    error_in_exec = None
    error_before_exec = None
    execution_count = None


class CountingComm:
    """Counts what would go over the wire; checks ``series`` sequence numbers."""

    def __init__(self) -> None:
        self.comm_id = uuid.uuid4().hex
        self.messages = 0
        self.series_messages = 0
        self.bytes = 0
        self.points = 0
        self.gaps = 0
        self.send_s = 0.0
        self._seq: int | None = None
        self._closed = False

    def send(self, data: dict[str, Any], buffers: Any = None) -> None:
        t0 = time.perf_counter()
        text = json.dumps(data)  # what the kernel's session does with the header
        size = len(text) + sum(len(memoryview(b).cast("B")) for b in buffers or [])
        self.messages += 1
        self.bytes += size
        if data.get("method") == "series":
            self.series_messages += 1
            seq = int(data["seq"])
            if self._seq is not None and seq != self._seq + 1:
                self.gaps += 1
            self._seq = seq
            self.points += sum(b["count"] * len(b["names"]) for b in data["blocks"])
        self.send_s += time.perf_counter() - t0

    def on_msg(self, fn: Any) -> None:
        pass

    def on_close(self, fn: Any) -> None:
        pass

    def close(self) -> None:
        self._closed = True


class _Manager:
    def __init__(self) -> None:
        self.targets: dict[str, Any] = {}

    def register_target(self, name: str, fn: Any) -> None:
        self.targets[name] = fn

    def unregister_target(self, name: str, fn: Any) -> None:
        self.targets.pop(name, None)


class Loaded:
    def __init__(self, ext: Any, shell: _Shell, comm: CountingComm) -> None:
        self.ext = ext
        self.shell = shell
        self.comm = comm

    def end_cell(self) -> None:
        self.shell.events.trigger("post_run_cell", _CellResult())


@contextmanager
def loaded_extension() -> Iterator[Loaded]:
    """Load the extension (torch must be imported) with one counting panel attached."""
    from ..kernel import extension

    if extension.current() is not None:
        raise RuntimeError("the extension is already loaded in this process")
    shell, manager = _Shell(), _Manager()
    ext = extension.load(shell, manager)
    comm = CountingComm()
    try:
        manager.targets[COMM_TARGET](
            comm, {"content": {"data": {"method": "open", "protocol_version": PROTOCOL_VERSION}}}
        )
        yield Loaded(ext, shell, comm)
    finally:
        extension.unload(shell)
