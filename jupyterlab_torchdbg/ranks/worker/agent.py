"""A worker's one daemon thread: its socket to the kernel, its sampler, its clock.

Started at the worker's first optimizer step (or its first exception), in the process
that uses it: a forked child never uses its parent's thread or socket. The thread owns
the DEALER socket (zmq sockets are not thread-safe) and, on a 20 ms tick:

- receives the kernel's messages (``config``, ``prepare``/``commit``/``cancel``,
  ``resume``) and answers at once (``ack``);
- samples the training thread's stack (``sys._current_frames``, ~50 Hz) for its phase:
  ``torch_wait`` inside torch.distributed / autograd / nn.parallel (waiting for the
  other ranks), ``paused`` while held by an agreed action, else ``user``; the share of
  samples not waiting is ``own``;
- every 100 ms sends the new step rows as one ``rows`` message (with the detector's
  explosion / vanishing alerts: rank_signals.py; the newest sampled step's layer norms,
  named only when the kernel may lack the names: cadence.py ``LayerNames``), every 0.5 s
  without rows a ``heartbeat`` (with the training thread's stack once it has not stepped
  for ``hang_s``, each frame marked as the user's or not: kernel/thread_stacks.py, and the
  collective it is in or finished last, from torch's flight recorder: collectives.py): at
  most 10 messages a second. A large world's kernel asks for both less often (``config``,
  up to ``MAX_INTERVAL_S``); the heartbeat that first finds the training thread stuck for
  ``hang_s`` goes at once all the same: a hang reaches the kernel at ``hang_s``;
- identity changes (the process group came up) send ``hello`` again;
- a rank paused by the kernel resumes by itself once the kernel has been unreachable
  for ``LOST_RELEASE_S`` (its process ended or its extension unloaded without a
  ``resume``): a lost kernel never holds training forever.

Other threads hand it messages through a queue (``post``; ``send_now`` waits until
sent). ``close`` sends ``bye`` and ends the thread, which closes the socket with a
linger so what is queued still reaches the kernel.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from ...kernel.thread_stacks import stack_lines
from ..wire import transport as wire
from ..wire.envelope import WIRE_VERSION
from . import collectives, identity
from .agreed import Agreements
from .cadence import LayerNames, newly_hung, take_cadence, waits_in_torch

if TYPE_CHECKING:
    import zmq
    from jupyter_client.session import Session

    from ..wire.messages import Heartbeat, Hello, Identity, Layers, Row, Rows, Signal

TICK_S = 0.02
ROWS_S = 0.1
HEARTBEAT_S = 0.5
IDENTITY_S = 1.0
#: Rows per ``rows`` message (the rest go in the next).
MAX_ROWS = 500
#: A paused rank whose kernel has been unreachable this long resumes.
LOST_RELEASE_S = 10.0
#: Frames in a stuck rank's stack (the innermost kept).
MAX_STACK = 60

Outgoing = tuple[str, Mapping[str, object], threading.Event | None]


class WorkerState(Protocol):
    """What the agent reads of its worker (worker.py)."""

    address: str
    key: str
    agreed: Agreements
    hang_s: float
    train_tid: int | None
    #: A step row every so many steps (the kernel's config in a large world).
    row_stride: int

    def take_rows(self, limit: int) -> list[Row]: ...

    def take_signals(self) -> tuple[list[Signal], int]: ...

    def take_layers(self) -> Layers | None: ...

    def since_step(self) -> float | None: ...


class Agent:
    def __init__(self, worker: WorkerState) -> None:
        self.worker = worker
        self.pid = os.getpid()
        self.errors: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self._outbox: queue.SimpleQueue[Outgoing] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._closed = False
        self.phase = "user"
        self._samples: Counter[str] = Counter()
        self._identity: Identity | None = None
        #: Since when the kernel is unreachable (None: connected, or not yet tried).
        self.lost_since: float | None = None
        self._next: dict[str, float] = {}
        self._rows_since_beat = False
        #: The step at which the last heartbeat went at once for a hang (``_newly_hung``).
        self._hung_step: int | None = None
        self._names = LayerNames()  # which reports carry the layer names
        #: Seconds between ``rows`` / heartbeats (the kernel's ``config`` may lengthen them).
        self.rows_s = ROWS_S
        self.heartbeat_s = HEARTBEAT_S
        self._thread = threading.Thread(target=self._run, name="torchdbg-rank", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and os.getpid() == self.pid

    # --- any thread --------------------------------------------------------------------

    def post(
        self, msg_type: str, content: Mapping[str, object], done: threading.Event | None = None
    ) -> None:
        self._outbox.put((msg_type, content, done))

    def send_now(self, msg_type: str, content: Mapping[str, object], timeout: float = 5.0) -> bool:
        """Queue a message and wait (bounded) until the thread has sent it."""
        if not self.alive:
            return False
        done = threading.Event()
        self.post(msg_type, content, done)
        return done.wait(timeout)

    def close(self, state: str, timeout: float = 4.0) -> None:
        """Send ``bye`` and what is queued, end the thread (in its own process only)."""
        if self._closed or os.getpid() != self.pid:
            return
        self._closed = True
        if self._thread.is_alive():
            self.post("bye", {"state": state})
            self._stop.set()
            if self._thread is not threading.current_thread():
                self._thread.join(timeout)

    # --- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            ctx, sock = wire.connect(self.worker.address, self.worker.key)
            sess = wire.session(self.worker.key)
        except Exception:
            self.errors["connect"] += 1
            self._drop_outbox()
            return
        try:
            self._loop(sess, sock)
        except Exception:
            self.errors["loop"] += 1
        finally:
            self._drop_outbox()
            try:
                sock.close(wire.LINGER_MS)
                ctx.term()
            except Exception:
                self.errors["close"] += 1

    def _loop(self, sess: Session, sock: zmq.Socket[bytes]) -> None:
        import zmq

        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        poller.register(monitor, zmq.POLLIN)
        try:
            self._hello(sess, sock)
            self._ticks(sess, sock, poller, monitor)
        finally:
            sock.disable_monitor()
            monitor.close(0)

    def _ticks(
        self, sess: Session, sock: zmq.Socket[bytes], poller: zmq.Poller, mon: zmq.Socket[bytes]
    ) -> None:
        now = time.monotonic()
        self._next = {"rows": now + ROWS_S, "beat": now + HEARTBEAT_S, "ident": now + IDENTITY_S}
        self._rows_since_beat = False
        while True:
            try:
                ready = dict(poller.poll(int(TICK_S * 1000)))
                if mon in ready:
                    self._connection_events(mon)
                if sock in ready:
                    self._receive(sess, sock)
            except Exception:
                self.errors["recv"] += 1
            if self._stop.is_set():
                self._flush_outbox(sess, sock)  # the last rows, then bye
                return
            try:
                self._tick(sess, sock)
            except Exception:
                self.errors["tick"] += 1

    def _tick(self, sess: Session, sock: zmq.Socket[bytes]) -> None:
        self._flush_outbox(sess, sock)
        self._sample()
        now = time.monotonic()
        due = self._next
        if now >= due["rows"]:
            due["rows"] = now + self.rows_s
            if self._send_rows(sess, sock):
                self._rows_since_beat = True
        lost = self.lost_since
        if lost is not None and now - lost > LOST_RELEASE_S and self.worker.agreed.paused:
            self.worker.agreed.resume()
            self.errors["resumed:lost"] += 1
        if now >= due["ident"]:
            due["ident"] = now + IDENTITY_S
            if identity.identity() != self._identity:
                self._hello(sess, sock)
        hung = self._newly_hung()
        if now >= due["beat"] or hung:
            due["beat"] = now + self.heartbeat_s
            if hung or not self._rows_since_beat:
                self._send(sess, sock, "heartbeat", self._heartbeat())
            self._rows_since_beat = False

    def _newly_hung(self) -> bool:
        """True once per step, when the training thread has not stepped for ``hang_s``:
        that heartbeat (with the stack) goes at once, not at the next of the cadence."""
        w = self.worker
        hung = newly_hung(w.since_step(), w.hang_s, w.agreed.step, self._hung_step)
        if hung:
            self._hung_step = w.agreed.step
        return hung

    def _send(
        self, sess: Session, sock: zmq.Socket[bytes], msg_type: str, content: Mapping[str, object]
    ) -> bool:
        try:
            ok = wire.send(sess, sock, msg_type, content)
        except Exception:
            self.errors["send"] += 1
            return False
        if ok:
            self.sent[msg_type] += 1
        else:
            self.errors["send:full"] += 1
        return ok

    def _hello(self, sess: Session, sock: zmq.Socket[bytes]) -> None:
        # (on this thread, not at import: without a built _version.py it reads metadata)
        from ...package_version import __version__

        ident = identity.identity()
        self._identity = ident
        self._names.forget()  # (a new identity, or a kernel that may be new)
        torch = sys.modules.get("torch")
        content: Hello = {
            "identity": ident,
            "job_key": identity.job_key(ident["world_size"]),
            "torch": str(getattr(torch, "__version__", "")),
            "cell": os.environ.get(wire.CELL_ENV),
            "wire": WIRE_VERSION,  # the handshake: the kernel refuses another (R59)
            "package": __version__,
        }
        self._send(sess, sock, "hello", content)

    def _flush_outbox(self, sess: Session, sock: zmq.Socket[bytes]) -> None:
        while True:
            try:
                msg_type, content, done = self._outbox.get_nowait()
            except queue.Empty:
                return
            if msg_type == "bye" or msg_type == "exception":
                self._send_rows(sess, sock)  # the last steps before the end
            self._send(sess, sock, msg_type, content)
            if done is not None:
                done.set()

    def _drop_outbox(self) -> None:
        """Nothing more will be sent: release whoever waits."""
        while True:
            try:
                _, _, done = self._outbox.get_nowait()
            except queue.Empty:
                return
            if done is not None:
                done.set()

    def _connection_events(self, monitor: zmq.Socket[bytes]) -> None:
        import zmq
        from zmq.utils.monitor import recv_monitor_message

        while True:
            try:
                event = recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event["event"] == zmq.EVENT_CONNECTED:
                self.lost_since = None
                self._names.forget()  # (a kernel that may be a new one)
            elif event["event"] == zmq.EVENT_DISCONNECTED and self.lost_since is None:
                self.lost_since = time.monotonic()

    def _receive(self, sess: Session, sock: zmq.Socket[bytes]) -> None:
        for _ in range(100):
            try:
                got = wire.recv(sess, sock)
            except ValueError:
                self.errors["refused"] += 1
                continue
            if got is None:
                return
            _, msg_type, content = got
            agreed = self.worker.agreed
            if msg_type == "config":
                hang = content.get("hang_s")
                if isinstance(hang, (int, float)) and hang > 0:
                    self.worker.hang_s = float(hang)
                self._cadence(content)
            elif msg_type == "prepare":
                self._send(sess, sock, "ack", agreed.prepare(content))
            elif msg_type in ("commit", "cancel"):
                agreed.decide(str(content.get("action_id", "")), msg_type)
            elif msg_type == "resume":
                agreed.resume()
            elif msg_type == "refused" and not self.errors["refused:kernel"]:
                self.errors["refused:kernel"] += 1  # said once: the kernel drops the rest
                reason = str(content.get("reason", ""))[:500]
                print(
                    f"jupyterlab_torchdbg: the kernel refused this rank: {reason}", file=sys.stderr
                )

    def _cadence(self, config: Mapping[str, object]) -> None:
        """A large world: ``rows`` / heartbeats less often, a row every so many steps."""
        intervals = {"rows_s": self.rows_s, "heartbeat_s": self.heartbeat_s}
        stride = take_cadence(config, intervals, {"rows_s": ROWS_S, "heartbeat_s": HEARTBEAT_S})
        self.rows_s, self.heartbeat_s = intervals["rows_s"], intervals["heartbeat_s"]
        if stride is not None:
            self.worker.row_stride = stride

    # --- what it sends -------------------------------------------------------------------

    def _send_rows(self, sess: Session, sock: zmq.Socket[bytes]) -> bool:
        rows = self.worker.take_rows(MAX_ROWS)
        if not rows:
            return False
        # the detector after the rows: every read it judges is in these rows or earlier
        signals, checked = self.worker.take_signals()
        samples, self._samples = self._samples, Counter()
        user, wait = samples["user"], samples["torch_wait"]
        own = user / (user + wait) if user + wait else None
        layers, layout = self._names.outgoing(self.worker.take_layers())
        content: Rows = {
            "rows": rows,
            "layers": layers,
            "own": own,
            "phase": self.phase,
            "signals": signals,
            "checked": checked,
        }
        self._names.sent(layout, self._send(sess, sock, "rows", content))
        return True

    def _heartbeat(self) -> Heartbeat:
        w = self.worker
        since = w.since_step()
        beat: Heartbeat = {
            "step": w.agreed.step,
            "since_step_s": since,
            "phase": self.phase,
            "stack": None,
        }
        if since is not None and since >= w.hang_s:
            frame = self._training_frame()
            beat["stack"], beat["stack_user"] = stack_lines(frame, MAX_STACK)
            try:  # which collective it waits in, or finished last (R57)
                beat["collective"] = collectives.snapshot(frame, w.agreed.step)
            except Exception:
                self.errors["collective"] += 1
            del frame
        return beat

    def _training_frame(self) -> FrameType | None:
        tid = self.worker.train_tid
        return None if tid is None else sys._current_frames().get(tid)

    def _sample(self) -> None:
        agreed = self.worker.agreed
        if agreed.paused or agreed.holding:
            phase = "paused"
        else:
            phase = "torch_wait" if waits_in_torch(self._training_frame()) else "user"
        self.phase = phase
        self._samples[phase] += 1
