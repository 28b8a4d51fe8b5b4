"""Through the real Jupyter server websocket, the path the browser uses (R08).

jupyter-server drops iopub traffic past its rate limits ("IOPub message rate exceeded").
A training loop calling ``log()`` 5,000 times a second must arrive intact: coalesced to
at most 10 messages a second, no sequence gap, every point present, the user's own prints
still shown.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import time
import uuid
from typing import Any

import numpy as np
from jupyter_server.services.kernels.connection.base import deserialize_binary_message
from kernel_client import validate_kernel_message

from jupyterlab_torchdbg.protocol import PROTOCOL_VERSION

SESSION = uuid.uuid4().hex


def make_msg(msg_type: str, content: dict[str, Any], channel: str = "shell") -> dict[str, Any]:
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": msg_type,
            "username": "test",
            "session": SESSION,
            "version": "5.3",
            "date": "",
        },
        "parent_header": {},
        "metadata": {},
        "content": content,
        "channel": channel,
        "buffers": [],
    }


def parse(frame: str | bytes) -> dict[str, Any]:
    if isinstance(frame, bytes):
        return deserialize_binary_message(frame)
    return json.loads(frame)


CELL = textwrap.dedent(
    """
    import time, torch
    from jupyterlab_torchdbg import log
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 4:
        while n > (time.perf_counter() - t0) * 5000:
            pass
        log(loss=torch.tensor(float(n)))
        n += 1
        if n % 5000 == 0:
            print('epoch', n // 5000)
    print('done', n)
    """
)


async def test_r08_rate_coalescing_through_server_websocket(
    jp_fetch: Any, jp_ws_fetch: Any
) -> None:
    r = await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))
    kid = json.loads(r.body.decode())["id"]
    ws = await jp_ws_fetch("api", "kernels", kid, "channels")
    try:
        frames: list[tuple[float, dict[str, Any]]] = []

        async def until(pred: Any, timeout: float = 60) -> None:
            deadline = time.monotonic() + timeout
            while not pred():
                left = deadline - time.monotonic()
                assert left > 0, "timed out"
                try:
                    frame = await asyncio.wait_for(ws.read_message(), timeout=min(left, 1))
                except asyncio.TimeoutError:
                    continue
                assert frame is not None, "websocket closed"
                frames.append((time.monotonic(), parse(frame)))

        def replied(msg_id: str, kind: str) -> bool:
            return any(
                m["msg_type"] == kind and m["parent_header"].get("msg_id") == msg_id
                for _, m in frames
            )

        load = make_msg(
            "execute_request",
            {
                "code": "%load_ext jupyterlab_torchdbg",
                "silent": False,
                "store_history": False,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
        )
        await ws.write_message(json.dumps(load))
        await until(lambda: replied(load["header"]["msg_id"], "execute_reply"))

        comm_id = uuid.uuid4().hex
        await ws.write_message(
            json.dumps(
                make_msg(
                    "comm_open",
                    {
                        "comm_id": comm_id,
                        "target_name": "jupyterlab_torchdbg",
                        "data": {"method": "open", "protocol_version": PROTOCOL_VERSION},
                    },
                )
            )
        )
        run = make_msg(
            "execute_request",
            {
                "code": CELL,
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
        )
        await ws.write_message(json.dumps(run))
        run_id = run["header"]["msg_id"]
        await until(
            lambda: (
                replied(run_id, "execute_reply")
                and any(
                    m["msg_type"] == "status"
                    and m["parent_header"].get("msg_id") == run_id
                    and m["content"]["execution_state"] == "idle"
                    for _, m in frames
                )
            ),
            timeout=120,
        )
        await asyncio.sleep(0.3)

        reply = next(
            m
            for _, m in frames
            if m["msg_type"] == "execute_reply" and m["parent_header"]["msg_id"] == run_id
        )
        assert reply["content"]["status"] == "ok"
        stdout = "".join(
            m["content"]["text"]
            for _, m in frames
            if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
        )
        n = int(stdout.split("done")[-1].split()[0])
        assert "epoch 3" in stdout  # the user's prints still show
        assert "IOPub message rate exceeded" not in stdout + json.dumps(
            [m["content"] for _, m in frames if m["msg_type"] == "stream"]
        )

        comm = [
            (t, m)
            for t, m in frames
            if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id
        ]
        for _, m in comm:
            validate_kernel_message(m["content"]["data"])
        series = [(t, m) for t, m in comm if m["content"]["data"]["method"] == "series"]
        assert 8 <= len(series) <= 10 * 4 + 2, len(series)
        seqs = [m["content"]["data"]["seq"] for _, m in series]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))

        # The panel's name table: the snapshot's blocks, then names a series block
        # carries the first time its id goes out; later blocks carry only the id.
        snapshot = next(m for _, m in comm if m["content"]["data"]["method"] == "snapshot")
        table = {b["id"]: b["names"] for b in snapshot["content"]["data"]["blocks"]}
        announced = 0

        def loss_values(m: dict[str, Any]) -> np.ndarray:
            nonlocal announced
            blocks = m["content"]["data"]["blocks"]
            parts = []
            for i, b in enumerate(blocks):
                if "names" in b:
                    table[b["id"]] = b["names"]
                    announced += b["names"] == ["loss"]
                if table[b["id"]] == ["loss"]:  # KeyError: a block this panel cannot decode
                    parts.append(np.frombuffer(bytes(m["buffers"][2 * i + 1]), dtype="<f4"))
            return np.concatenate(parts) if parts else np.zeros(0, dtype="<f4")

        ys = np.concatenate([loss_values(m) for _, m in series])
        assert announced == 1  # "loss" named once in the whole run, not in every message
        assert ys.size == n
        np.testing.assert_array_equal(ys, np.arange(n, dtype=np.float32))
        # messages/s over the streaming window stays under 10 (+ the end-of-cell flush)
        span = series[-1][0] - series[0][0]
        assert span > 2, "the stream should arrive while the cell runs"
        assert (len(series) - 1) / span <= 10.5
    finally:
        ws.close()
        await jp_fetch("api", "kernels", kid, method="DELETE")
