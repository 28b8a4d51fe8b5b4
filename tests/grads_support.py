"""In-process fakes for the gradient monitor's unit tests (no kernel needed).

The fake shell, comm manager and comm are ``jupyterlab_torchdbg.testing``'s (shared with
the benchmark, in the style of ipywidgets' DummyComm): the real extension is loaded against
them, so the step hook, the stream, the actions and every message are the production
code. Here the comm records every message and validates it against the protocol schema
as it is sent, and decodes the stream as the panel does (with its name table).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from kernel_client import validate_kernel_message

from jupyterlab_torchdbg import testing
from jupyterlab_torchdbg.kernel import extension, watches
from jupyterlab_torchdbg.kernel.grads.monitor import GradMonitor
from jupyterlab_torchdbg.testing import FakeCommManager, FakeEvents, FakeShell

__all__ = ["FakeComm", "FakeCommManager", "FakeEvents", "FakeShell", "Session", "session"]


class FakeComm(testing.FakeComm):
    """Records every message; validates it against the schema like the real client.

    A message that fails is not sent: the kernel's registry answers a reply it cannot
    send with a ``failed`` error instead. So that a test which does not look at the reply
    still fails, each ack whose result its schema rejects is kept in ``invalid_acks``,
    and ``session`` fails at its end when there is one."""

    def __init__(self) -> None:
        super().__init__(record=True, validate=self._validate_and_keep)
        self.invalid_acks: list[str] = []

    def _validate_and_keep(self, data: dict[str, Any]) -> None:
        try:
            validate_kernel_message(data)
        except Exception as e:
            if data.get("method") == "ack":
                self.invalid_acks.append(f"{data.get('action')}: {e}")
            raise

    def messages(self, method: str) -> list[dict[str, Any]]:
        return [d for d, _ in self.sent if d.get("method") == method]

    def action(self, action: str, args: Any = None) -> dict[str, Any]:
        rid = uuid.uuid4().hex
        data = {"method": "action", "request_id": rid, "action": action, "args": args or {}}
        self.deliver(data)
        return next(d for d, _ in reversed(self.sent) if d.get("request_id") == rid)

    def series(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Every point of every ``series`` message, per name, as the panel decodes it.

        The names come from the panel's name table (the snapshot's, then the names a
        block carries the first time its id goes out); a block this comm could not
        have decoded fails the test.
        """
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        table: dict[int, list[str]] = {}
        for data, bufs in self.sent:
            if data.get("method") == "snapshot":
                table = {b["id"]: b["names"] for b in data["blocks"]}
            if data.get("method") != "series":
                continue
            for i, block in enumerate(data["blocks"]):
                if "names" in block:
                    table[block["id"]] = block["names"]
                names = table.get(block["id"])
                assert names is not None, f"block id {block['id']} has no names on this comm"
                x = np.frombuffer(bufs[2 * i], dtype="<f8")
                n = block["count"]
                y = np.frombuffer(bufs[2 * i + 1], dtype="<f4").reshape(n, len(names))
                for j, name in enumerate(names):
                    xs, ys = x, y[:, j].copy()
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
        return testing.grad_monitor()

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
        watches.clear_watches()
    try:
        with testing.loaded_extension(user_ns, FakeComm()) as loaded:
            assert isinstance(loaded.comm, FakeComm)
            yield Session(loaded.ext, loaded.shell, loaded.comm)
            assert not loaded.comm.invalid_acks, loaded.comm.invalid_acks
    finally:
        watches.clear_watches()
