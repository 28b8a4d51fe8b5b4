"""The kernel's end of the rank transport: one ROUTER, one poller thread.

zmq sockets are not thread-safe, so the ROUTER lives on one daemon thread that does
everything with it: it receives and verifies workers' messages (wire.py: Jupyter's HMAC
and replay check) and hands each verified one to ``on_message(worker_id, msg_type,
content)``; it sends what other threads queued with ``send``, which only appends to a
queue and wakes the thread through an inproc PAIR (itself used under a lock). A message
that fails verification is dropped and counted in ``refused``: nothing from a process
without the key ever reaches the callback.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from . import wire

OnMessage = Callable[[bytes, str, dict[str, Any]], None]
#: How long the poller waits for a message or a wake-up before looking again (ms).
POLL_MS = 200


class Endpoint:
    """Binds on construction (``host`` None: ``$TORCHDBG_LISTEN`` or loopback) and
    starts its thread; ``close()`` ends both. Only the bind may raise."""

    def __init__(self, on_message: OnMessage, key: str | None = None, host: str | None = None):
        import zmq

        self.key = key or wire.new_key()
        self.host = host or os.environ.get(wire.LISTEN_ENV) or wire.DEFAULT_HOST
        self._on_message = on_message
        self._session = wire.session(self.key)
        self._ctx, self._sock, self.port = wire.bind(self.host)
        connect_host = "127.0.0.1" if self.host in ("0.0.0.0", "*") else self.host
        #: What workers connect to (local ones; remote ones use this host's address).
        self.address = f"tcp://{connect_host}:{self.port}"
        #: Messages dropped: bad signature, replayed, malformed.
        self.refused = 0
        #: Messages delivered to the callback.
        self.received = 0
        #: Errors caught (never raised): site -> count.
        self.errors: Counter[str] = Counter()
        self._outbox: queue.SimpleQueue[tuple[bytes, str, dict[str, Any]] | None] = (
            queue.SimpleQueue()
        )
        wake = f"inproc://torchdbg-wake-{id(self)}"
        self._wake_rx = self._ctx.socket(zmq.PAIR)
        self._wake_rx.bind(wake)
        self._wake_tx = self._ctx.socket(zmq.PAIR)
        self._wake_tx.connect(wake)
        self._wake_lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="torchdbg-ranks", daemon=True)
        self._thread.start()

    # --- any thread ----------------------------------------------------------------------

    def send(self, worker_id: bytes, msg_type: str, content: dict[str, Any]) -> None:
        """Queue a message for one worker; the poller thread signs and sends it."""
        if self._closed:
            return
        self._outbox.put((worker_id, msg_type, content))
        self._wake()

    def close(self) -> None:
        """Stop the thread, close the sockets, remove the env vars naming this endpoint
        (idempotent, never raises)."""
        if self._closed:
            return
        self._closed = True
        for name, value in ((wire.ENDPOINT_ENV, self.address), (wire.KEY_ENV, self.key)):
            if os.environ.get(name) == value:
                os.environ.pop(name, None)
        self._outbox.put(None)
        self._wake()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)
        if self._thread.is_alive():
            self.errors["close:thread"] += 1
            return  # the thread still owns the sockets: leave them to it
        try:
            with self._wake_lock:
                self._wake_tx.close(0)
            self._wake_rx.close(0)
            self._sock.close(0)
            self._ctx.term()
        except Exception:
            self.errors["close"] += 1

    def _wake(self) -> None:
        import zmq

        try:
            with self._wake_lock:
                if not self._wake_tx.closed:
                    self._wake_tx.send(b"", flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # a wake-up is already waiting
        except Exception:
            self.errors["wake"] += 1

    # --- the poller thread ---------------------------------------------------------------

    def _run(self) -> None:
        import zmq

        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._wake_rx, zmq.POLLIN)
        while True:
            try:
                ready = dict(poller.poll(POLL_MS))
            except Exception:
                self.errors["poll"] += 1
                if self._closed:
                    return
                continue
            if self._wake_rx in ready:
                self._drain_wakes()
            if not self._flush_outbox():
                return
            if self._sock in ready:
                self._receive_all()

    def _drain_wakes(self) -> None:
        import zmq

        try:
            while True:
                self._wake_rx.recv(flags=zmq.NOBLOCK)
        except zmq.Again:
            pass
        except Exception:
            self.errors["wake"] += 1

    def _flush_outbox(self) -> bool:
        """Send what was queued; False once ``close`` asked the thread to end."""
        while True:
            try:
                item = self._outbox.get_nowait()
            except queue.Empty:
                return True
            if item is None:
                return False
            worker_id, msg_type, content = item
            try:
                if not wire.send(self._session, self._sock, msg_type, content, ident=worker_id):
                    self.errors["send:full"] += 1
            except Exception:
                self.errors["send"] += 1

    def _receive_all(self, limit: int = 1000) -> None:
        for _ in range(limit):
            try:
                got = wire.recv(self._session, self._sock)
            except ValueError:
                self.refused += 1
                continue
            except Exception:
                self.errors["recv"] += 1
                return
            if got is None:
                return
            ident, msg_type, content = got
            if ident is None:
                self.refused += 1
                continue
            self.received += 1
            try:
                self._on_message(ident, msg_type, content)
            except Exception:
                self.errors["on_message"] += 1
