"""R58 (a replayed message, or one of another job, is refused) and R59 (the wire's
version handshake): real endpoints, a real worker process (torch on CPU), real sockets.

Each refusal is counted by its reason in the endpoint's ``refusals`` (the panel's
"N refused" chip is their total), kept as a sentence in ``notes``, and a worker of
another version or job is told why (``refused``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import zmq

from jupyterlab_torchdbg.ranks.kernel.endpoint import Endpoint
from jupyterlab_torchdbg.ranks.wire import envelope
from jupyterlab_torchdbg.ranks.wire import transport as wire

TIMEOUT_S = 60.0
SCHEMA_PATH = Path(wire.__file__).with_name("wire.schema.json")

WORKER = """
import sys, time
import jupyterlab_torchdbg
jupyterlab_torchdbg.attach(sys.argv[1], sys.argv[2])
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(int(sys.argv[3])):
    opt.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()
    time.sleep(0.05)
"""


def _wait(pred: Any, timeout: float = TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return bool(pred())


class Kernel:
    """An endpoint recording each verified message; ``frames`` what it read, raw."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.got: list[tuple[bytes, str, dict[str, Any]]] = []
        self.frames: list[list[bytes]] = []
        read = wire.read_frames

        def capture(sock: Any, *a: Any, **k: Any) -> Any:
            frames = read(sock, *a, **k)
            if frames is not None:
                self.frames.append([f.bytes for f in frames])
            return frames

        monkeypatch.setattr(wire, "read_frames", capture)  # the endpoint's thread reads here
        self.ep = Endpoint(lambda w, t, c: self.got.append((w, t, c)))

    def types(self) -> list[str]:
        return [t for _, t, _ in self.got]


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Any:
    k = Kernel(monkeypatch)
    yield k
    k.ep.close()


def _run_worker(
    tmp_path: Path, k: Kernel, steps: int, **env: str
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    clean = {n: v for n, v in os.environ.items() if not n.startswith("TORCHDBG_")}
    return subprocess.run(
        [sys.executable, str(script), k.ep.address, k.ep.key, str(steps)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _client(k: Kernel, key: str | None = None) -> tuple[zmq.Context[Any], zmq.Socket[Any]]:
    ctx, sock = wire.connect(k.ep.address, key or k.ep.key)
    sock.setsockopt(zmq.LINGER, 0)
    return ctx, sock


def _reply(sock: zmq.Socket[Any], sess: Any) -> tuple[str, dict[str, Any]] | None:
    if not sock.poll(int(TIMEOUT_S * 1000)):
        return None
    got = wire.recv(sess, sock)
    return None if got is None else (got[1], got[2])


def test_the_schema_names_the_wire_version_and_checks_the_envelope() -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    assert schema["x-wire-version"] == envelope.WIRE_VERSION
    jsonschema.Draft202012Validator.check_schema(schema)
    meta_schema = {**schema, "$ref": "#/$defs/Envelope"}
    stamp = envelope.Stamp(envelope.job_of("k" * 64))
    first, second = stamp.next(), stamp.next()
    jsonschema.validate(first, meta_schema)
    assert second["seq"] == first["seq"] + 1 and second["sender"] == first["sender"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**first, "wire": 1}, meta_schema)


def test_r58_a_real_workers_message_sent_again_is_a_replay(kernel: Kernel, tmp_path: Path) -> None:
    k = kernel
    proc = _run_worker(tmp_path, k, 10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _wait(lambda: "bye" in k.types()), k.types()
    hello = next(c for _, t, c in k.got if t == "hello")
    assert hello["wire"] == envelope.WIRE_VERSION and isinstance(hello["package"], str)
    assert k.ep.refused == 0, k.ep.refusals
    schema = json.loads(SCHEMA_PATH.read_text())
    for frames in k.frames:  # each message's signed envelope, as the schema says
        jsonschema.validate(json.loads(frames[5]), {**schema, "$ref": "#/$defs/Envelope"})
    for _, msg_type, content in k.got:
        jsonschema.validate(content, {**schema, "$ref": f"#/$defs/{msg_type}"})
    seqs = [json.loads(f[5])["seq"] for f in k.frames]
    assert seqs == list(range(1, len(seqs) + 1))  # one sender, counting up
    delivered = len(k.got)
    # [peer, DELIM, signature, header, parent, metadata, content]
    rows = next(f for f in k.frames if json.loads(f[3])["msg_type"] == "rows")
    # an eavesdropper on the wire: PLAIN's password (the connect token) and the bytes
    ctx, sock = _client(k)
    try:
        sock.send_multipart(rows[1:])
        assert _wait(lambda: k.ep.refusals["replay"] == 1), k.ep.refusals
        # Jupyter's digest history forgotten (culled): the counter still says replay
        k.ep._session.digest_history.clear()
        sock.send_multipart(rows[1:])
        assert _wait(lambda: k.ep.refusals["replay"] == 2), k.ep.refusals
    finally:
        sock.close(0)
        ctx.term()
    assert len(k.got) == delivered and k.ep.refusals == {"replay": 2}
    assert any("(replay)" in n for n in k.ep.notes)


def test_r58_a_worker_of_another_job_is_refused_and_told_why(
    kernel: Kernel, tmp_path: Path
) -> None:
    k = kernel
    proc = _run_worker(tmp_path, k, 30, TORCHDBG_JOB_ID="0123456789abcdef")  # 1.5 s
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _wait(lambda: k.ep.refusals["job"] >= 3), k.ep.refusals
    assert k.got == [] and set(k.ep.refusals) == {"job"}
    assert "'0123456789abcdef'" in k.ep.notes[0] and k.ep.job in k.ep.notes[0]
    assert "the kernel refused this rank" in proc.stderr and "TORCHDBG_JOB_ID" in proc.stderr
    # the same worker with this kernel's job (its environment, as worker_env gives it)
    proc = _run_worker(tmp_path, k, 3, TORCHDBG_JOB_ID=k.ep.job)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _wait(lambda: "bye" in k.types()), k.types()
    assert set(k.ep.refusals) == {"job"}


def test_r58_a_wrong_key_is_refused_at_the_door_and_at_the_signature(kernel: Kernel) -> None:
    k = kernel
    other = wire.new_key()
    ctx, sock = _client(k, other)  # another key: its token fails zmq's handshake
    try:
        wire.send(wire.session(other), sock, "hello", {})
        assert _wait(lambda: k.ep.refusals["key"] >= 1), k.ep.refusals
    finally:
        sock.close(0)
        ctx.term()
    ctx, sock = _client(k)  # the token, not the key: it cannot sign
    try:
        wire.send(wire.session(other, k.ep.job), sock, "hello", {})
        assert _wait(lambda: k.ep.refusals["signature"] == 1), k.ep.refusals
    finally:
        sock.close(0)
        ctx.term()
    assert k.got == [] and set(k.ep.refusals) == {"key", "signature"}


def test_r59_a_worker_of_another_wire_version_is_refused_with_its_reason(kernel: Kernel) -> None:
    k = kernel
    ctx, sock = _client(k)
    try:
        old = wire.session(k.ep.key)
        # a worker from before the handshake: no envelope at all
        sock.send_multipart(old.serialize(old.msg("hello", {"identity": {}})))
        told = _reply(sock, old)
        assert told is not None and told[0] == "refused", told
        assert "wire version none" in told[1]["reason"] and "2" in told[1]["reason"]
        # a newer one: its envelope says the next version
        meta = {**wire.stamp_of(old).next(), "wire": envelope.WIRE_VERSION + 1}
        sock.send_multipart(old.serialize(old.msg("hello", {}, metadata=meta)))
        assert _wait(lambda: k.ep.refusals["version"] == 2), k.ep.refusals
        # the same connection speaking this version is heard
        assert wire.send(old, sock, "hello", {"wire": envelope.WIRE_VERSION})
        assert _wait(lambda: k.types() == ["hello"]), k.ep.refusals
    finally:
        sock.close(0)
        ctx.term()
    assert k.ep.refusals == {"version": 2} and k.ep.refused == 2
    newer = f"wire version {envelope.WIRE_VERSION + 1}, this kernel {envelope.WIRE_VERSION}"
    assert any(newer in n for n in k.ep.notes), list(k.ep.notes)


def test_r58_the_guard_is_bounded_and_orders_each_sender() -> None:
    guard = envelope.Guard("j" * 16, max_senders=2)
    a, b, c = (envelope.Stamp("j" * 16) for _ in range(3))
    ma1, ma2 = a.next(), a.next()
    assert guard.check(ma2) == a.sender
    with pytest.raises(envelope.Refusal, match="replay"):
        guard.check(ma1)  # older than the last heard
    for bad, reason in (
        ({**ma1, "seq": 0}, "malformed"),
        ({**ma1, "seq": True}, "malformed"),
        ({**ma1, "sender": "x"}, "malformed"),
        ({k: v for k, v in ma1.items() if k != "wire"}, "version"),
        ({**b.next(), "job": "other"}, "job"),
    ):
        with pytest.raises(envelope.Refusal) as e:
            guard.check(bad)
        assert e.value.reason == reason
    guard.check(b.next())
    guard.check(c.next())  # the third sender: the least recently heard (a) is forgotten
    assert len(guard._last) == 2 and a.sender not in guard._last
