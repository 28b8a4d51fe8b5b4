"""The kernel's end of the rank transport: one ROUTER, one poller thread.

zmq sockets are not thread-safe, so the ROUTER lives on one daemon thread that does
everything with it: it admits connections (gate.py: the ZAP handler, only the key's
token gets in), receives and verifies workers' messages (wire/transport.py: frame/byte limits
before reading, Jupyter's HMAC and replay check) and hands each verified one to
``on_message(worker_id, msg_type, content)``; it sends what other threads queued with
``send``, which only appends to a queue and wakes the thread through an inproc PAIR
(itself used under a lock). Whatever is refused is dropped and counted, by reason, in
``refusals`` (``refused``: the total): nothing from a process without the key ever
reaches the callback, and it costs the kernel no buffered frame (R55). A signed message
of another wire version (R59) or another job, or a replay (R58), is refused after its
HMAC by the envelope's guard (wire/envelope.py): counted by reason, its sentence kept in
``notes`` and logged, and the worker told why (``refused``) once per sender and reason.

Where it listens (listen.py): an ipc socket in a 0700 directory unless
``TORCHDBG_LISTEN`` asks for TCP; a bad ``TORCHDBG_LISTEN`` raises ``ListenError``.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ...protocol.json_types import JsonObject
from ..wire import transport as wire
from ..wire.envelope import JOB_ENV, Guard, job_of
from . import listen
from .gate import Gate

if TYPE_CHECKING:
    import zmq

#: The callback a verified message goes to: its content is decoded JSON, checked by the
#: signature and the envelope only (each kind's fields are checked where it is read).
OnMessage = Callable[[bytes, str, JsonObject], None]
#: How long the poller waits for a message or a wake-up before looking again (ms).
POLL_MS = 200
#: After reading workers' messages, how long the next ones wait to be read together (ms):
#: hundreds of ranks report at their own times, and a wake-up per message cost the
#: kernel more than the messages (issue #25). A message to send (``send``), a connection
#: or a refused handshake ends the wait.
COALESCE_MS = 50
#: After the kernel sent workers something (``config``, an all-rank action's ``prepare``
#: / ``commit``), their messages are read with ``COALESCE_MS`` pauses for this long,
#: whatever ``coalesce_ms`` is: their answers are not held behind a long pause (s).
BRISK_S = 2.0
#: A connection that has not finished zmq's handshake by then is dropped (ms).
HANDSHAKE_MS = 5000
ZAP_ADDRESS = "inproc://zeromq.zap.01"
#: Refusal sentences kept (``notes``), and senders told why they were refused.
MAX_NOTES = 16
MAX_TOLD = 1024
log = logging.getLogger("jupyterlab_torchdbg.ranks")


class Endpoint:
    """Binds on construction (``host`` None: ``$TORCHDBG_LISTEN``, else an ipc socket)
    and starts its thread; ``close()`` ends both. Only the bind may raise
    (``listen.ListenError`` for a bad ``TORCHDBG_LISTEN``)."""

    def __init__(
        self,
        on_message: OnMessage,
        key: str | None = None,
        host: str | None = None,
        job: str | None = None,
    ):
        import zmq

        self.key = key or wire.new_key()
        #: The job every message must name (``TORCHDBG_JOB_ID``; the key's by default).
        self.job = job or job_of(self.key)
        self._on_message = on_message
        self._session = wire.session(self.key, self.job)
        self._guard = Guard(self.job)
        #: The newest refusals of signed messages, as sentences (version, job, replay).
        self.notes: deque[str] = deque(maxlen=MAX_NOTES)
        self._told: set[tuple[str, str]] = set()
        self._gate = Gate(wire.connect_token(self.key))
        #: Refusals by reason (gate.py, wire.Refused): the same Counter the gate fills.
        self.refusals = self._gate.refusals
        #: Everything refused: connections without the key, messages over the limits,
        #: unsigned, replayed, malformed or throttled.
        self.refused = 0
        #: Messages delivered to the callback.
        self.received = 0
        #: Errors caught (never raised): site -> count.
        self.errors: Counter[str] = Counter()
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        try:
            self._open(host if host is not None else os.environ.get(wire.LISTEN_ENV))
        except BaseException:
            self._ctx.destroy(0)
            raise
        b = self._binding
        #: ``ipc`` (this user's processes on this machine) or ``tcp``.
        self.transport = b.transport
        self.host = b.host
        self.port = b.port
        #: What workers on this machine connect to (remote ones use this host's address).
        self.address = b.address
        self._outbox: queue.SimpleQueue[tuple[bytes, str, Mapping[str, object]] | None] = (
            queue.SimpleQueue()
        )
        self._wake_lock = threading.Lock()
        self._closed = False
        #: The wait between two reads of workers' messages (the hub sets it: scale.py).
        self.coalesce_ms = COALESCE_MS
        #: Until when (monotonic) the reads are brisk: ``BRISK_S`` after a send.
        self._brisk_until = 0.0
        self._thread = threading.Thread(target=self._run, name="torchdbg-ranks", daemon=True)
        self._thread.start()

    def _open(self, listen_on: str | None) -> None:
        """The ZAP handler first (no connection before it answers), then the ROUTER."""
        import zmq

        ctx = self._ctx
        self._zap = ctx.socket(zmq.REP)
        self._zap.setsockopt(zmq.LINGER, 0)
        self._zap.bind(ZAP_ADDRESS)
        sock = self._sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, wire.HWM)
        sock.setsockopt(zmq.RCVHWM, wire.HWM)
        sock.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES)
        sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)
        sock.setsockopt(zmq.PLAIN_SERVER, 1)
        self._monitor = sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        )
        self._binding = listen.bind(sock, listen_on)
        wake = f"inproc://torchdbg-wake-{id(self)}"
        self._wake_rx = ctx.socket(zmq.PAIR)
        self._wake_rx.bind(wake)
        self._wake_tx = ctx.socket(zmq.PAIR)
        self._wake_tx.connect(wake)

    # --- any thread ----------------------------------------------------------------------

    def send(self, worker_id: bytes, msg_type: str, content: Mapping[str, object]) -> None:
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
        named = ((wire.ENDPOINT_ENV, self.address), (wire.KEY_ENV, self.key), (JOB_ENV, self.job))
        for name, value in named:
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
            self._sock.disable_monitor()
            self._ctx.destroy(0)
        except Exception:
            self.errors["close"] += 1
        listen.release(self._binding)

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
        poller.register(self._zap, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        # between two reads of the workers' messages: what else may wake the thread
        quiet = zmq.Poller()
        for other in (self._wake_rx, self._zap, self._monitor):
            quiet.register(other, zmq.POLLIN)
        gate = self._gate
        pause = False
        while True:
            try:
                if pause:  # the workers' messages wait a little, read together
                    pause = False
                    if quiet.poll(self._pause_ms()):
                        ready = dict(poller.poll(POLL_MS))
                    else:  # nothing else came meanwhile: read them without a second poll
                        ready = {self._sock: zmq.POLLIN}
                else:
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
            try:
                if self._zap in ready:
                    gate.answer_zap(self._zap)
                if self._monitor in ready:
                    gate.count_handshakes(self._monitor)
            except Exception:
                self.errors["gate"] += 1
            if self._sock in ready:
                pause = self._receive_all() > 0
            self.refused = gate.refused

    def _pause_ms(self) -> int:
        """The pause before the next read: ``coalesce_ms``, or ``COALESCE_MS`` while the
        workers answer what the kernel just sent them."""
        if self.coalesce_ms > COALESCE_MS and time.monotonic() < self._brisk_until:
            return COALESCE_MS
        return self.coalesce_ms

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
            self._brisk_until = time.monotonic() + BRISK_S
            try:
                if not wire.send(self._session, self._sock, msg_type, content, ident=worker_id):
                    self.errors["send:full"] += 1
            except Exception:
                self.errors["send"] += 1

    def _receive_all(self, limit: int = 1000) -> int:
        """Read what waits (at most ``limit`` messages); the messages delivered."""
        gate = self._gate
        delivered = 0
        for _ in range(limit):
            try:
                frames = wire.read_frames(self._sock)
            except wire.Refused as r:
                gate.refuse(r.reason)
                continue
            except Exception:
                self.errors["recv"] += 1
                return delivered
            if frames is None:
                return delivered
            peer = frames[0].bytes
            if not gate.admit(peer, sum(len(f) for f in frames)):
                gate.refuse("throttled")
                continue
            try:
                ident, msg_type, content = wire.verify(self._session, frames, self._guard)
            except wire.Refused as r:
                gate.refuse(r.reason, peer)
                if r.detail:
                    self._note(peer, r)
                continue
            except Exception:
                self.errors["verify"] += 1
                continue
            if ident is None:
                gate.refuse("malformed", peer)
                continue
            gate.proved(peer)
            self.received += 1
            delivered += 1
            try:
                self._on_message(ident, msg_type, content)
            except Exception:
                self.errors["on_message"] += 1
        return delivered

    def _note(self, peer: bytes, r: wire.Refused) -> None:
        """Keep, log and tell (once per sender and reason) a signed message's refusal."""
        sender = r.sender or peer.hex()
        if (sender, r.reason) in self._told:
            return
        if len(self._told) >= MAX_TOLD:
            self._told.clear()
        self._told.add((sender, r.reason))
        text = f"a worker's message was refused ({r.reason}): {r.detail}"
        self.notes.append(text)
        log.warning("jupyterlab_torchdbg: %s", text)
        if r.reason in ("version", "job"):  # a replay's sender may be the live worker
            try:
                wire.send(self._session, self._sock, "refused", {"reason": r.detail}, ident=peer)
            except Exception:
                self.errors["send:refused"] += 1
