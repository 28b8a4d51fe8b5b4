"""A synchronous real-kernel driver for the exception tests.

The exception tests run many failing cells; one kernel per test module keeps them fast on
a small machine, so this driver uses jupyter_client's blocking client (pytest-jupyter's
kernels and event loops are per test). It sends cell ids the way JupyterLab does
(``metadata.cellId``), answers stdin requests (``%debug``, ``%pdb``), and validates every
comm message against the protocol schema as it arrives (``kernel_client``).
"""

from __future__ import annotations

import os
import queue
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager
from kernel_client import validate_kernel_message

from jupyterlab_torchdbg.protocol import COMM_TARGET, PROTOCOL_VERSION


@dataclass
class Cell:
    """What one execute request produced."""

    reply: dict[str, Any]
    errors: list[dict[str, Any]]
    stdout: str
    stderr: str
    prompts: list[str]
    comm: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reply["content"]["status"] == "ok"

    def exceptions(self, comm_id: str | None = None) -> list[dict[str, Any]]:
        return [
            d
            for c, d in self.comm
            if d.get("method") == "exception" and (comm_id is None or c == comm_id)
        ]


class SyncKernel:
    def __init__(self, km: KernelManager, kc: Any) -> None:
        self.km = km
        self.kc = kc
        self.comm: list[tuple[str, dict[str, Any]]] = []
        self.closed: set[str] = set()

    # --- iopub ---------------------------------------------------------------------

    def _handle(self, msg: dict[str, Any], sink: list[dict[str, Any]]) -> None:
        mt = msg["msg_type"]
        if mt == "comm_msg":
            data = msg["content"].get("data") or {}
            validate_kernel_message(data)
            self.comm.append((msg["content"]["comm_id"], data))
        elif mt == "comm_close":
            self.closed.add(msg["content"]["comm_id"])
        sink.append(msg)

    def pump(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        sink: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            try:
                self._handle(self.kc.get_iopub_msg(timeout=0.05), sink)
            except queue.Empty:
                pass

    # --- execution -----------------------------------------------------------------

    def execute(
        self,
        code: str,
        *,
        cell_id: str | None = None,
        stdin: Iterable[str] = (),
        timeout: float = 90.0,
    ) -> Cell:
        replies = list(stdin)
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": bool(replies),
            "stop_on_error": False,
        }
        metadata = {"cellId": cell_id} if cell_id else {}
        msg = self.kc.session.msg("execute_request", content, metadata=metadata)
        self.kc.shell_channel.send(msg)
        msg_id = msg["header"]["msg_id"]
        before = len(self.comm)
        mine: list[dict[str, Any]] = []
        prompts: list[str] = []
        reply: dict[str, Any] | None = None
        idle = False
        deadline = time.monotonic() + timeout
        while reply is None or not idle:
            if time.monotonic() > deadline:
                raise TimeoutError(f"cell did not finish in {timeout}s:\n{code}")
            try:
                req = self.kc.stdin_channel.get_msg(timeout=0.01)
                prompts.append(req["content"].get("prompt", ""))
                self.kc.input(replies.pop(0) if replies else "q")
            except queue.Empty:
                pass
            if reply is None:
                try:
                    r = self.kc.shell_channel.get_msg(timeout=0.01)
                    if r["parent_header"].get("msg_id") == msg_id:
                        reply = r
                except queue.Empty:
                    pass
            try:
                m = self.kc.get_iopub_msg(timeout=0.02)
            except queue.Empty:
                continue
            sink: list[dict[str, Any]] = []
            self._handle(m, sink)
            if m["parent_header"].get("msg_id") == msg_id:
                mine.extend(sink)
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    idle = True
        assert reply is not None

        def text(name: str) -> str:
            return "".join(
                m["content"]["text"]
                for m in mine
                if m["msg_type"] == "stream" and m["content"]["name"] == name
            )

        errors = [m["content"] for m in mine if m["msg_type"] == "error"]
        return Cell(reply, errors, text("stdout"), text("stderr"), prompts, self.comm[before:])

    def run(self, code: str, **kw: Any) -> Cell:
        cell = self.execute(code, **kw)
        if not cell.ok:
            tb = "\n".join("\n".join(e.get("traceback", [])) for e in cell.errors)
            raise AssertionError(f"cell failed:\n{code}\n{tb}\n{cell.stderr}")
        return cell

    def fail(self, code: str, **kw: Any) -> dict[str, Any]:
        """Run a cell that must fail; return the one ``exception`` message it produced."""
        cell = self.execute(code, **kw)
        assert not cell.ok, f"cell unexpectedly succeeded:\n{code}"
        # IPython prints ExceptionGroups with the stdlib formatter (stderr, no `error` msg)
        assert cell.errors or cell.stderr, "IPython showed no error output"
        found = cell.exceptions()
        if not found:  # sent in post_run_cell, which precedes idle; allow a late arrival
            n = len(self.comm)
            self.pump(1.0)
            found = [d for _, d in self.comm[n:] if d.get("method") == "exception"]
        assert found, f"no exception message for:\n{code}"
        return found[-1]

    # --- the comm ------------------------------------------------------------------

    def open_comm(self, timeout: float = 30.0) -> str:
        comm_id = uuid.uuid4().hex
        content = {
            "comm_id": comm_id,
            "target_name": COMM_TARGET,
            "data": {"method": "open", "protocol_version": PROTOCOL_VERSION},
        }
        self.kc.shell_channel.send(self.kc.session.msg("comm_open", content))
        deadline = time.monotonic() + timeout
        while not any(c == comm_id and d.get("method") == "snapshot" for c, d in self.comm):
            if time.monotonic() > deadline:
                raise TimeoutError("no snapshot after comm_open")
            self.pump(0.1)
        self.pump(0.3)  # snapshot parts follow the snapshot
        return comm_id

    def action(self, comm_id: str, action: str, timeout: float = 30.0) -> dict[str, Any]:
        """Send an argument-less action; return its ack/error."""
        rid = uuid.uuid4().hex
        data = {"method": "action", "request_id": rid, "action": action, "args": {}}
        content = {"comm_id": comm_id, "data": data}
        self.kc.shell_channel.send(self.kc.session.msg("comm_msg", content))
        deadline = time.monotonic() + timeout
        while True:
            for c, d in self.comm:
                if c == comm_id and d.get("request_id") == rid:
                    return d
            if time.monotonic() > deadline:
                raise TimeoutError(f"no reply to {action}")
            self.pump(0.1)

    def messages(self, method: str, comm_id: str | None = None) -> list[dict[str, Any]]:
        return [
            d
            for c, d in self.comm
            if d.get("method") == method and (comm_id is None or c == comm_id)
        ]


def start_kernel(cwd: Path) -> Iterator[SyncKernel]:
    """Start a real ipykernel (this interpreter) in ``cwd``; yields a driver, then stops it."""
    env = {
        **os.environ,
        "PYTHONWARNINGS": "ignore::DeprecationWarning",
        "OMP_NUM_THREADS": "1",
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    km = KernelManager(kernel_name="python3")
    km.connection_file = str(cwd / f"kernel-{uuid.uuid4().hex[:8]}.json")
    km.start_kernel(env=env, cwd=str(cwd))
    kc = km.blocking_client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=90)
        yield SyncKernel(km, kc)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
