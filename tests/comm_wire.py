"""Talking to a real kernel's comm with hostile JSON (R43 tests and the comm fuzz test).

``WireKernel`` is the exception tests' ``SyncKernel`` (blocking client, every comm message
validated against the protocol schema as it arrives) with three additions: it sends any
JSON a browser could send (``NaN``/``Infinity`` literals, ``"\\udc00"`` escapes of lone
surrogates, integers of any size: jupyter_client's own packer refuses the first two),
it keeps one ordered log of comm messages and comm closes (to check that an error comes
before a close), and it reads the extension's state and the kernel's RSS.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _exc_helpers import SyncKernel, start_kernel
from jsonschema import Draft202012Validator
from jupyter_client.jsonutil import json_default
from kernel_client import validate_ack_result

from jupyterlab_torchdbg.protocol import COMM_TARGET, load_schema


def hostile_packer(obj: Any) -> bytes:
    """JSON as a browser's ``JSON.stringify`` may produce it: ASCII with ``\\uXXXX``
    escapes (lone surrogates included), ``NaN``/``Infinity`` literals, big integers."""
    return json.dumps(obj, default=json_default, ensure_ascii=True, allow_nan=True).encode()


def on_the_wire(obj: Any) -> Any:
    """``obj`` as the kernel decodes it (escaped surrogate pairs join, for one)."""
    return json.loads(hostile_packer(obj))


def _method_validators() -> dict[str, Draft202012Validator]:
    defs = load_schema()["$defs"]
    out = {}
    for name, d in defs.items():
        const = (
            d.get("properties", {}).get("method", {}).get("const") if isinstance(d, dict) else None
        )
        if isinstance(const, str):
            out[const] = Draft202012Validator({"$defs": defs, "$ref": f"#/$defs/{name}"})
    return out


_VALIDATORS = _method_validators()


def validate_kernel_message(data: dict[str, Any]) -> None:
    """``kernel_client.validate_kernel_message``, with one validator per method built once
    (that one builds them per message and tries every ``KernelMessage`` branch: 3.5 ms a
    message, too slow for the fuzz test's tens of thousands). A message is valid for
    ``KernelMessage`` exactly when it is valid for the definition its method names."""
    validator = _VALIDATORS.get(data.get("method"))  # type: ignore[arg-type]
    if validator is None:
        raise AssertionError(f"unknown method {data.get('method')!r}")
    validator.validate(data)
    validate_ack_result(data)


#: Defined in the kernel once: the state an invalid request must not change.
STATE_CODE = """
def _torchdbg_state():
    import json
    from jupyterlab_torchdbg.kernel.extension import current
    e = current()
    control = dict(e.control.state()) if e.control is not None else None
    grads = None
    if e.grads is not None:
        grads = {"mode": list(e.grads.mode), "thresholds": e.grads.thresholds.to_json()}
    names = sorted(n for n in e.stream.names() if not n.startswith("mem/"))
    return json.dumps(
        {
            "control": control,
            "grads": grads,
            "recording": e.memory.recorder.status() if e.memory is not None else None,
            "names": names,
            "errors": dict(e.errors),
        },
        sort_keys=True,
        default=str,
    )
"""


class WireKernel(SyncKernel):
    def __init__(self, km: Any, kc: Any) -> None:
        super().__init__(km, kc)
        kc.session.pack = hostile_packer
        #: ("msg", comm_id, data) or ("close", comm_id, {}) in arrival order.
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self._state_defined = False

    def _handle(self, msg: dict[str, Any], sink: list[dict[str, Any]]) -> None:
        mt = msg["msg_type"]
        if mt == "comm_msg":
            c = msg["content"]
            data = c.get("data") or {}
            validate_kernel_message(data)
            self.comm.append((c["comm_id"], data))
            self.events.append(("msg", c["comm_id"], data))
        elif mt == "comm_close":
            self.closed.add(msg["content"]["comm_id"])
            self.events.append(("close", msg["content"]["comm_id"], {}))
        sink.append(msg)

    # --- sending ---------------------------------------------------------------------

    def send_comm(self, comm_id: str, data: Any) -> None:
        """Send one comm message (any JSON) without waiting."""
        content = {"comm_id": comm_id, "data": data}
        self.kc.shell_channel.send(self.kc.session.msg("comm_msg", content))

    def open_raw(self, comm_id: str, data: Any) -> None:
        """Send a ``comm_open`` with any ``data`` without waiting."""
        content = {"comm_id": comm_id, "target_name": COMM_TARGET, "data": data}
        self.kc.shell_channel.send(self.kc.session.msg("comm_open", content))

    # --- replies ---------------------------------------------------------------------

    def replies(self, comm_id: str, start: int = 0) -> list[dict[str, Any]]:
        """Every ack/error on ``comm_id`` logged from event ``start`` on."""
        return [
            d
            for kind, c, d in self.events[start:]
            if kind == "msg" and c == comm_id and d.get("method") in ("ack", "error")
        ]

    def wait_for(self, done: Any, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError("no reply in time")
            self.pump(0.02)

    def request(self, comm_id: str, data: Any, timeout: float = 30.0) -> dict[str, Any]:
        """Send one message and return its one reply (by position: replies on a comm come
        in request order); a second reply arriving meanwhile fails."""
        start = len(self.events)
        self.send_comm(comm_id, data)
        self.wait_for(lambda: self.replies(comm_id, start), timeout)
        self.pump(0.2)
        got = self.replies(comm_id, start)
        assert len(got) == 1, got
        return got[0]

    # --- state -----------------------------------------------------------------------

    def value(self, expr: str) -> str:
        """stdout of ``print(expr)`` in the kernel, stripped."""
        return self.run(f"print({expr})").stdout.strip()

    def state(self) -> dict[str, Any]:
        """What the extension holds that an action could change (``mem/`` series excluded:
        the memory poller adds them on its own)."""
        if not self._state_defined:
            self.run(STATE_CODE)
            self._state_defined = True
        out = self.run("print(_torchdbg_state())").stdout.strip()
        state: dict[str, Any] = json.loads(out)
        return state

    def rss_bytes(self) -> int:
        """The kernel process's resident set size, from /proc."""
        pid = int(self.run("import os; print(os.getpid())").stdout.strip())
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")


def start_wire_kernel(cwd: Path) -> Iterator[WireKernel]:
    """A real ipykernel in ``cwd`` with torch imported and the extension loaded."""
    gen = start_kernel(cwd)
    base = next(gen)
    try:
        k = WireKernel(base.km, base.kc)
        k.run("import torch\n%load_ext jupyterlab_torchdbg")
        yield k
    finally:
        gen.close()
