"""A small driver for a real ipykernel: run cells, open the tool's comm, collect messages.

Every test that says "real kernel" uses this over pytest-jupyter's ``jp_start_kernel``.
One coroutine pumps iopub; comm messages (with their binary buffers) are kept in order,
and every comm message is validated against the protocol schema as it arrives, so any
test that talks to the kernel also checks the wire format.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from jsonschema import Draft202012Validator

from jupyterlab_torchdbg.protocol import (
    COMM_TARGET,
    PROTOCOL_VERSION,
    action_result_schemas,
    load_schema,
)

_SCHEMA = load_schema()
_kernel_validator = Draft202012Validator(
    {"$defs": _SCHEMA["$defs"], "$ref": "#/$defs/KernelMessage"}
)
#: An ack's ``result`` is checked against its action's ``x-result``.
RESULT_VALIDATORS = {
    name: Draft202012Validator(result) for name, result in action_result_schemas(_SCHEMA).items()
}


def validate_ack_result(data: dict[str, Any]) -> None:
    """Raise when an ``ack``'s result does not match its action's result schema."""
    if data.get("method") != "ack":
        return
    validator = RESULT_VALIDATORS.get(data.get("action"))  # type: ignore[arg-type]
    if validator is not None:
        validator.validate(data["result"])


def validate_kernel_message(data: dict[str, Any]) -> None:
    """Raise unless ``data`` is a valid kernel -> panel message of a known method."""
    _kernel_validator.validate(data)
    defs = _SCHEMA["$defs"]
    by_method = {d["properties"]["method"]["const"]: n for n, d in defs.items() if _is_msg(d)}
    method = data.get("method")
    if method not in by_method:
        raise AssertionError(f"unknown method {method!r}")
    Draft202012Validator({"$defs": defs, "$ref": f"#/$defs/{by_method[method]}"}).validate(data)
    validate_ack_result(data)


def _is_msg(d: Any) -> bool:
    try:
        return isinstance(d["properties"]["method"]["const"], str)
    except (KeyError, TypeError):
        return False


@dataclass
class CommMessage:
    comm_id: str
    data: dict[str, Any]
    buffers: list[bytes]
    t: float = field(default_factory=time.monotonic)
    #: For ``snapshot``/``series``: each block's names as this comm's panel knows them
    #: when the message arrives (its name table), None for a block it cannot decode.
    names: list[list[str] | None] | None = None

    @property
    def method(self) -> str:
        return str(self.data.get("method"))


@dataclass
class ExecResult:
    reply: dict[str, Any]
    stdout: str
    stderr: str
    errors: list[dict[str, Any]]
    outputs: list[dict[str, Any]]

    @property
    def ok(self) -> bool:
        return self.reply["content"]["status"] == "ok"


class KernelDriver:
    """Drive one kernel through a jupyter_client AsyncKernelClient."""

    def __init__(self, kc: Any) -> None:
        self.kc = kc
        self.comm: list[CommMessage] = []
        #: Per comm: block id -> names, as that comm's panel would hold them.
        self.name_tables: dict[str, dict[int, list[str]]] = {}
        self.closed: set[str] = set()
        #: Comms the kernel opened (on iopub) and closed.
        self.kernel_closed: set[str] = set()
        self.iopub: list[dict[str, Any]] = []
        self._replies: dict[str, dict[str, Any]] = {}

    async def create_subshell(self) -> str:
        """Create a kernel subshell (JEP 91) and return its id."""
        msg = self.kc.session.msg("create_subshell_request", {})
        self.kc.control_channel.send(msg)
        while True:
            reply = await self.kc.get_control_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return str(reply["content"]["subshell_id"])

    # --- iopub pump ----------------------------------------------------------------

    async def _pump_once(self, timeout: float) -> bool:
        try:
            msg = await self.kc.get_iopub_msg(timeout=timeout)
        except (asyncio.TimeoutError, TimeoutError):
            return False
        except Exception as e:  # queue.Empty from some client versions
            if type(e).__name__ == "Empty":
                return False
            raise
        mt = msg["msg_type"]
        if mt == "comm_msg":
            c = msg["content"]
            data = c.get("data") or {}
            validate_kernel_message(data)
            bufs = [bytes(b) for b in msg.get("buffers") or []]
            names = self._resolve_names(c["comm_id"], data)
            self.comm.append(CommMessage(c["comm_id"], data, bufs, names=names))
        elif mt == "comm_close":
            comm_id = msg["content"]["comm_id"]
            # the kernel's own comms (the "loaded" announcement) apart from the panels'
            kernel_opened = any(
                m["msg_type"] == "comm_open" and m["content"].get("comm_id") == comm_id
                for m in self.iopub
            )
            (self.kernel_closed if kernel_opened else self.closed).add(comm_id)
        else:
            self.iopub.append(msg)
        return True

    def _resolve_names(self, comm_id: str, data: dict[str, Any]) -> list[list[str] | None] | None:
        """Keep each comm's name table as its panel would (PROTOCOL.md, "The name table")."""
        method = data.get("method")
        if method == "snapshot":
            self.name_tables[comm_id] = {b["id"]: b["names"] for b in data["blocks"]}
        elif method != "series":
            return None
        table = self.name_tables.setdefault(comm_id, {})
        for b in data["blocks"]:
            if "names" in b:
                table[b["id"]] = b["names"]
        return [table.get(b["id"]) for b in data["blocks"]]

    async def pump_until(self, predicate: Any, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("condition not met before timeout")
            await self._pump_once(min(left, 0.5))

    async def drain(self, seconds: float = 0.3) -> None:
        """Pump whatever arrives in the next ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await self._pump_once(max(0.01, deadline - time.monotonic()))

    # --- execution -----------------------------------------------------------------

    def start_execute(self, code: str, **header: Any) -> str:
        """Send an execute_request (optionally to a subshell) without waiting."""
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        return self.send_shell("execute_request", content, **header)

    async def execute(self, code: str, timeout: float = 120.0, **header: Any) -> ExecResult:
        return await self.wait_execute(self.start_execute(code, **header), timeout, code)

    async def wait_execute(self, msg_id: str, timeout: float = 120.0, code: str = "") -> ExecResult:
        """Wait for the reply and the idle status of an execute_request sent earlier."""
        replies = self._replies
        reply: dict[str, Any] | None = replies.pop(msg_id, None)
        deadline = time.monotonic() + timeout

        def idle() -> bool:
            return any(
                m["msg_type"] == "status"
                and m["parent_header"].get("msg_id") == msg_id
                and m["content"]["execution_state"] == "idle"
                for m in self.iopub
            )

        # Pump iopub while the cell runs, so comm messages are timestamped on arrival.
        while reply is None or not idle():
            if time.monotonic() > deadline:
                raise TimeoutError(f"cell did not finish in {timeout}s:\n{code}")
            if reply is None:
                try:
                    r = await self.kc.get_shell_msg(timeout=0.02)
                    parent = r["parent_header"].get("msg_id")
                    if parent == msg_id:
                        reply = r
                    else:  # a reply to another request (another subshell): keep it
                        replies[parent] = r
                except Exception as e:
                    if type(e).__name__ not in ("Empty", "TimeoutError"):
                        raise
            await self._pump_once(0.05)
        mine = [m for m in self.iopub if m["parent_header"].get("msg_id") == msg_id]
        stdout = "".join(
            m["content"]["text"]
            for m in mine
            if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
        )
        stderr = "".join(
            m["content"]["text"]
            for m in mine
            if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"
        )
        errors = [m["content"] for m in mine if m["msg_type"] == "error"]
        outputs = [m for m in mine if m["msg_type"] in ("execute_result", "display_data")]
        return ExecResult(reply, stdout, stderr, errors, outputs)

    async def run(self, code: str, timeout: float = 120.0) -> ExecResult:
        """Execute and assert success (showing the traceback otherwise)."""
        r = await self.execute(code, timeout)
        if not r.ok:
            tb = "\n".join("\n".join(e.get("traceback", [])) for e in r.errors)
            raise AssertionError(f"cell failed:\n{code}\n{tb}\n{r.stderr}")
        return r

    async def value(self, expr: str) -> str:
        """stdout of ``print(expr)``, stripped."""
        return (await self.run(f"print({expr})")).stdout.strip()

    # --- the tool's comm -----------------------------------------------------------

    def send_shell(self, msg_type: str, content: dict[str, Any], **header: Any) -> str:
        msg = self.kc.session.msg(msg_type, content)
        msg["header"].update(header)
        self.kc.shell_channel.send(msg)
        return str(msg["header"]["msg_id"])

    async def open_comm(
        self,
        protocol_version: str = PROTOCOL_VERSION,
        wait: bool = True,
        client_id: str | None = None,
        **header: Any,
    ) -> str:
        """Open the tool's comm (``client_id``: the panel's per-tab id, R46)."""
        comm_id = uuid.uuid4().hex
        data = {"method": "open", "protocol_version": protocol_version}
        if client_id is not None:
            data["client_id"] = client_id
        self.send_shell(
            "comm_open",
            {"comm_id": comm_id, "target_name": COMM_TARGET, "data": data},
            **header,
        )
        if wait:
            await self.pump_until(
                lambda: (
                    comm_id in self.closed
                    or any(m.comm_id == comm_id and m.method == "snapshot" for m in self.comm)
                )
            )
        return comm_id

    async def action(
        self,
        comm_id: str,
        action: str,
        args: Any = None,
        request_id: str | None = None,
        raw: dict[str, Any] | None = None,
        timeout: float = 30.0,
        **header: Any,
    ) -> dict[str, Any]:
        """Send an action and return its one reply (ack or error)."""
        rid = request_id or uuid.uuid4().hex
        data = (
            raw
            if raw is not None
            else {
                "method": "action",
                "request_id": rid,
                "action": action,
                "args": {} if args is None else args,
            }
        )
        before = len(self.comm)
        self.send_shell("comm_msg", {"comm_id": comm_id, "data": data}, **header)

        def replied() -> bool:
            return any(
                m.comm_id == comm_id
                and m.method in ("ack", "error")
                and (raw is not None or m.data.get("request_id") == rid)
                for m in self.comm[before:]
            )

        await self.pump_until(replied, timeout)
        return next(
            m.data
            for m in self.comm[before:]
            if m.comm_id == comm_id
            and m.method in ("ack", "error")
            and (raw is not None or m.data.get("request_id") == rid)
        )

    def messages(self, method: str, comm_id: str | None = None) -> list[CommMessage]:
        return [
            m for m in self.comm if m.method == method and (comm_id is None or m.comm_id == comm_id)
        ]


def decode_blocks(msg: CommMessage) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Decode a series/snapshot message into {name: (x, y)} as the panel would.

    Names come from the comm's name table when the message arrived; a block whose id
    that comm's panel could not have known fails the test.
    """
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    blocks = msg.data["blocks"]
    assert len(msg.buffers) == 2 * len(blocks)
    for i, block in enumerate(blocks):
        names = msg.names[i] if msg.names is not None else block["names"]
        assert names is not None, f"block id {block['id']} has no names on this comm"
        x = np.frombuffer(msg.buffers[2 * i], dtype="<f8")
        y = np.frombuffer(msg.buffers[2 * i + 1], dtype="<f4")
        n = block["count"]
        assert x.size == n and y.size == n * len(names)
        rows = y.reshape(n, len(names))  # row-major: one value per name for each x
        for j, name in enumerate(names):
            prev = out.get(name)
            xs, ys = x, rows[:, j].copy()
            out[name] = (xs, ys) if prev is None else (np.r_[prev[0], xs], np.r_[prev[1], ys])
    return out


def merge_series(msgs: list[CommMessage]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """All points of several series messages, concatenated per name in order."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for m in msgs:
        for name, (x, y) in decode_blocks(m).items():
            prev = out.get(name)
            out[name] = (x, y) if prev is None else (np.r_[prev[0], x], np.r_[prev[1], y])
    return out
