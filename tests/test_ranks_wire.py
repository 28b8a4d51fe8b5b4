"""The rank transport (issue #15): Jupyter's signed messages over zmq, the kernel's
endpoint, and what the kernel side publishes to the processes it starts.

Real sockets, real processes for the boot hook; no torch in a subprocess here (fast).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from jupyterlab_torchdbg.ranks.kernel import worker_env
from jupyterlab_torchdbg.ranks.kernel.endpoint import Endpoint
from jupyterlab_torchdbg.ranks.wire import envelope
from jupyterlab_torchdbg.ranks.wire import transport as wire
from jupyterlab_torchdbg.ranks.worker import mp_wrap

TIMEOUT_S = 20.0


class Recorder:
    """The kernel side's callback: every verified message, in order."""

    def __init__(self) -> None:
        self.messages: list[tuple[bytes, str, dict[str, Any]]] = []
        self._cond = threading.Condition()

    def __call__(self, worker_id: bytes, msg_type: str, content: dict[str, Any]) -> None:
        with self._cond:
            self.messages.append((worker_id, msg_type, content))
            self._cond.notify_all()

    def wait(self, count: int, timeout: float = TIMEOUT_S) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.messages) >= count, timeout), self.messages


def _wait(pred: Any, timeout: float = TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return bool(pred())


@pytest.fixture
def endpoint() -> Any:
    rec = Recorder()
    ep = Endpoint(rec)
    yield ep, rec
    ep.close()


def _client(address: str, key: str) -> tuple[zmq.Context[Any], zmq.Socket[Any]]:
    ctx, sock = wire.connect(address, key)
    sock.setsockopt(zmq.LINGER, 0)
    return ctx, sock


def test_endpoint_delivers_signed_messages_and_answers(endpoint: Any) -> None:
    ep, rec = endpoint
    assert ep.address.startswith("ipc://") and len(ep.key) == 64
    ctx, sock = _client(ep.address, ep.key)
    try:
        sess = wire.session(ep.key)
        assert wire.send(sess, sock, "hello", {"x": 1, "norm": wire.finite_or_special(1e400)})
        rec.wait(1)
        worker_id, msg_type, content = rec.messages[0]
        assert msg_type == "hello" and content == {"x": 1, "norm": "Infinity"}
        # the kernel answers that worker from another thread; the worker verifies it
        threading.Thread(target=ep.send, args=(worker_id, "config", {"hang_s": 2.0})).start()
        assert sock.poll(int(TIMEOUT_S * 1000))
        got = wire.recv(sess, sock)
        assert got is not None and got[1:] == ("config", {"hang_s": 2.0})
        assert ep.refused == 0 and ep.received == 1 and not ep.errors
    finally:
        sock.close(0)
        ctx.term()


def test_r52_wrong_key_is_refused_and_replays_too(endpoint: Any) -> None:
    """A process without the key gets nothing in: its connection is refused at zmq's
    handshake (counted as ``key``), nothing it sends is delivered; a captured signed
    message sent again is refused by the session's replay check."""
    ep, rec = endpoint
    ctx, sock = _client(ep.address, wire.new_key())
    try:
        wrong = wire.session(wire.new_key())
        for _ in range(3):
            wire.send(wrong, sock, "hello", {"evil": True})
        sock.send_multipart([b"not", b"a", b"jupyter", b"message"])
        assert _wait(lambda: ep.refusals["key"] >= 1 and ep.refused >= 1)
    finally:
        sock.close(0)
        ctx.term()
    ctx, sock = _client(ep.address, ep.key)
    try:
        right = wire.session(ep.key)
        frames = wire.signed(right, "hello", {"ok": True})
        sock.send_multipart(frames)
        rec.wait(1)
        sock.send_multipart(frames)  # the same signature again
        assert _wait(lambda: ep.refusals["replay"] == 1)
        assert [m[1:] for m in rec.messages] == [("hello", {"ok": True})]
    finally:
        sock.close(0)
        ctx.term()


def test_close_ends_the_thread_and_removes_its_env(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = Endpoint(Recorder())
    monkeypatch.setenv(wire.ENDPOINT_ENV, ep.address)
    monkeypatch.setenv(wire.KEY_ENV, ep.key)
    monkeypatch.setenv(envelope.JOB_ENV, ep.job)
    assert ep.job == envelope.job_of(ep.key)  # a fresh key, a fresh job
    thread = ep._thread
    ep.close()
    ep.close()  # idempotent
    assert not thread.is_alive()
    assert wire.ENDPOINT_ENV not in os.environ and wire.KEY_ENV not in os.environ
    assert envelope.JOB_ENV not in os.environ
    ep.send(b"gone", "config", {})  # after close: nothing, no error


def test_r55_listen_host_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """TORCHDBG_LISTEN=0.0.0.0 binds every interface (remote workers); local workers
    still get a loopback address."""
    monkeypatch.setenv(wire.LISTEN_ENV, "0.0.0.0")
    ep = Endpoint(Recorder())
    try:
        assert ep.host == "0.0.0.0" and ep.address == f"tcp://127.0.0.1:{ep.port}"
        assert ep.transport == "tcp"
        last = ep._sock.getsockopt(zmq.LAST_ENDPOINT)
        assert isinstance(last, bytes) and last.decode().startswith("tcp://0.0.0.0:")
    finally:
        ep.close()


# --- what the kernel side publishes ---------------------------------------------------


def test_install_publishes_and_cleanup_puts_everything_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch.multiprocessing  # noqa: F401  (the module _wrap lives in)

    spawn_mod = sys.modules["torch.multiprocessing.spawn"]
    original = spawn_mod._wrap
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.delenv(wire.ENDPOINT_ENV, raising=False)
    monkeypatch.setenv(wire.KEY_ENV, "older")
    monkeypatch.delenv(envelope.JOB_ENV, raising=False)
    cleanup = worker_env.install("tcp://127.0.0.1:1", "k" * 64, cell_id="cell-1", job="j1")
    try:
        assert os.environ[wire.ENDPOINT_ENV] == "tcp://127.0.0.1:1"
        assert os.environ[wire.KEY_ENV] == "k" * 64
        assert os.environ[envelope.JOB_ENV] == "j1"  # what workers' messages must name
        assert os.environ[wire.CELL_ENV] == "cell-1"
        assert os.environ["PYTHONPATH"] == os.pathsep.join([worker_env.BOOT_DIR, "/somewhere"])
        assert spawn_mod._wrap is mp_wrap._wrap
        worker_env.set_cell("cell-2")
        assert os.environ[wire.CELL_ENV] == "cell-2"
    finally:
        cleanup()
    assert spawn_mod._wrap is original
    assert wire.ENDPOINT_ENV not in os.environ and wire.CELL_ENV not in os.environ
    assert envelope.JOB_ENV not in os.environ
    assert os.environ[wire.KEY_ENV] == "older"
    assert os.environ["PYTHONPATH"] == "/somewhere"


# --- the boot sitecustomize -----------------------------------------------------------

PROBE = """
import json, sys
watch = [type(f).__name__ for f in sys.meta_path]
print(json.dumps({"torch": "torch" in sys.modules, "watch": watch,
                  "site": sys.modules["sitecustomize"].__file__,
                  "other": getattr(sys, "_other_sitecustomize_ran", False)}))
"""


def _probe(tmp_path: Path, env_extra: dict[str, str]) -> dict[str, Any]:
    import json

    other = tmp_path / "other"
    other.mkdir(exist_ok=True)
    (other / "sitecustomize.py").write_text("import sys\nsys._other_sitecustomize_ran = True\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDBG_")}
    env["PYTHONPATH"] = os.pathsep.join([worker_env.BOOT_DIR, str(other)])
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_boot_chains_and_stays_inert_without_an_endpoint(tmp_path: Path) -> None:
    got = _probe(tmp_path, {})
    assert got["site"].startswith(worker_env.BOOT_DIR)
    assert got["other"] is True  # the sitecustomize it shadows still ran
    assert "_TorchWatch" not in got["watch"] and got["torch"] is False


def test_boot_waits_for_torch_without_importing_it(tmp_path: Path) -> None:
    got = _probe(tmp_path, {wire.ENDPOINT_ENV: "tcp://127.0.0.1:1", wire.KEY_ENV: "k"})
    assert got["other"] is True
    assert got["watch"][0] == "_TorchWatch" and got["torch"] is False


def test_workers_ping_the_kernel_over_tcp_only() -> None:
    """zmq heartbeats (a pong each from the kernel's I/O thread) only where the kernel
    may vanish with its host: over ipc its socket closes with its process."""
    key = wire.new_key()
    for address, ivl in (("ipc:///nonexistent/ranks", 0), ("tcp://127.0.0.1:9", 5000)):
        ctx, sock = wire.connect(address, key)
        try:
            assert sock.getsockopt(zmq.HEARTBEAT_IVL) == ivl
        finally:
            sock.close(0)
            ctx.term()
