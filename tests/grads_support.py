"""In-process fakes for the gradient monitor's unit tests (no kernel needed).

A fake shell (events + user namespace), a comm manager and a recording comm, in the
style of ipywidgets' DummyComm: the real extension is loaded against them, so the step
hook, the stream, the actions and every message are the production code. Messages are
validated against the protocol schema as they are sent.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kernel_client import validate_kernel_message

from jupyterlab_torchdbg.kernel import extension
from jupyterlab_torchdbg.kernel.grads import current_monitor, naming
from jupyterlab_torchdbg.kernel.grads.monitor import GradMonitor
from jupyterlab_torchdbg.protocol import COMM_TARGET, PROTOCOL_VERSION


class FakeEvents:
    def __init__(self) -> None:
        self.callbacks: dict[str, list[Any]] = {"pre_run_cell": [], "post_run_cell": []}

    def register(self, name: str, cb: Any) -> None:
        self.callbacks.setdefault(name, []).append(cb)

    def unregister(self, name: str, cb: Any) -> None:
        self.callbacks[name].remove(cb)

    def trigger(self, name: str, *args: Any) -> None:
        for cb in list(self.callbacks.get(name, [])):
            cb(*args)


@dataclass
class FakeShell:
    user_ns: dict[str, Any] = field(default_factory=dict)
    events: FakeEvents = field(default_factory=FakeEvents)
    kernel: Any = None

    def run_cell_end(self) -> None:
        """What IPython does when a cell finishes (post_run_cell with a result)."""
        self.events.trigger("post_run_cell", _Result())


class _Result:
    error_in_exec = None
    error_before_exec = None
    execution_count = 1


class FakeCommManager:
    def __init__(self) -> None:
        self.targets: dict[str, Any] = {}

    def register_target(self, name: str, fn: Any) -> None:
        self.targets[name] = fn

    def unregister_target(self, name: str, fn: Any) -> None:
        self.targets.pop(name, None)


class FakeComm:
    """Records every message; validates it against the schema like the real client."""

    def __init__(self) -> None:
        self.comm_id = uuid.uuid4().hex
        self.sent: list[tuple[dict[str, Any], list[bytes]]] = []
        self._on_msg: Any = None
        self._closed = False

    def send(self, data: dict[str, Any], buffers: Any = None) -> None:
        validate_kernel_message(data)
        self.sent.append((data, [bytes(b) for b in buffers or []]))

    def on_msg(self, fn: Any) -> None:
        self._on_msg = fn

    def on_close(self, fn: Any) -> None:
        pass

    def close(self) -> None:
        self._closed = True

    def messages(self, method: str) -> list[dict[str, Any]]:
        return [d for d, _ in self.sent if d.get("method") == method]

    def action(self, action: str, args: Any = None) -> dict[str, Any]:
        rid = uuid.uuid4().hex
        data = {"method": "action", "request_id": rid, "action": action, "args": args or {}}
        self._on_msg({"content": {"data": data}})
        return next(d for d, _ in reversed(self.sent) if d.get("request_id") == rid)

    def series(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Every point of every ``series`` message, per name, as the panel decodes it."""
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for data, bufs in self.sent:
            if data.get("method") != "series":
                continue
            for i, block in enumerate(data["blocks"]):
                x = np.frombuffer(bufs[2 * i], dtype="<f8")
                y = np.frombuffer(bufs[2 * i + 1], dtype="<f4")
                n = block["count"]
                for j, name in enumerate(block["names"]):
                    xs, ys = x, y[j * n : (j + 1) * n]
                    if name in out:
                        xs, ys = np.r_[out[name][0], xs], np.r_[out[name][1], ys]
                    out[name] = (xs, ys)
        return out

    def alerts(self) -> list[dict[str, Any]]:
        return [a for d in self.messages("alert") if not d.get("replay") for a in d["alerts"]]


@dataclass
class Session:
    ext: extension.Extension
    shell: FakeShell
    comm: FakeComm

    @property
    def monitor(self) -> GradMonitor:
        mon = current_monitor()
        assert mon is not None
        return mon

    def end_cell(self) -> None:
        self.shell.run_cell_end()

    def status(self) -> dict[str, Any]:
        return self.monitor.status(full=True)

    def track(self, name: str | None = None) -> dict[str, Any]:
        tracks = self.status()["tracks"]
        return tracks[0] if name is None else next(t for t in tracks if t["name"] == name)


@contextlib.contextmanager
def session(user_ns: dict[str, Any] | None = None, keep_watches: bool = False) -> Iterator[Session]:
    """Load the extension in-process against fakes; always unload (the hook is global)."""
    import torch  # noqa: F401  - the monitor attaches only once torch is imported

    assert extension.current() is None, "a previous test left the extension loaded"
    if not keep_watches:
        naming.clear_watches()
    shell = FakeShell(user_ns if user_ns is not None else {})
    manager = FakeCommManager()
    ext = extension.load(shell, manager)
    comm = FakeComm()
    try:
        manager.targets[COMM_TARGET](
            comm, {"content": {"data": {"method": "open", "protocol_version": PROTOCOL_VERSION}}}
        )
        yield Session(ext, shell, comm)
    finally:
        extension.unload(shell)
        naming.clear_watches()
