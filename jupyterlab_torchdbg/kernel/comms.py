"""The comm target: handshake, the set of live comms, broadcast, action dispatch.

Each panel (each browser tab, each nbclient, ...) opens its own comm to the target
``jupyterlab_torchdbg``; the hub answers with ``hello`` and a ``snapshot`` on that comm
only, then broadcasts the stream to every live comm (R05, R06). The comm joins the
broadcast in the same step as its snapshot (``Stream.send_snapshot``), so it gets every
``series`` message after the snapshot's ``seq`` and the names of every block they mention
(names go out once per block; the snapshot carries them all). A comm whose protocol
major version differs is refused with a message naming both versions (R07).
Sending never raises: failures are counted and the comm is dropped if it is closed.

When the kernel side loads it also opens a comm of its own on ``LOADED_TARGET`` and
closes it at once (``announce``): a panel that saw the side unloaded (``%unload_ext``, then
``%load_ext`` typed by hand) learns from it that it can open its comm again, at no cost
while nothing unloads.

The hub knows nothing of the extension: ``extension.py`` gives it four callables (the
``hello`` fields, the action handler, the snapshot writer, the error counter).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence

from ..package_version import __version__
from ..protocol import COMM_TARGET, LOADED_TARGET, PROTOCOL_VERSION, jsonable, major, wire_safe
from .action_registry import Reply, echoable_request_id
from .comm_types import Buffers, Comm, CommManager, JupyterMsg, Message
from .subshell_routes import SubshellRoutes

#: Sends one message (with its binary buffers) to one comm.
Deliver = Callable[[Message, Buffers], None]
#: The ``client_id`` of an ``open`` (the schema's pattern and length).
_CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _data(msg: JupyterMsg) -> object:
    """The ``content.data`` of a comm message (None when absent or not an object)."""
    content = msg.get("content") or {}
    return content.get("data") if isinstance(content, Mapping) else None


class CommHub:
    def __init__(
        self,
        comm_manager: CommManager,
        *,
        hello: Callable[[], Message],
        handle_action: Callable[[object, str], Reply],
        snapshot: Callable[[Deliver], None],
        on_error: Callable[[str], None],
        after_request: Callable[[], None] = lambda: None,
    ) -> None:
        """``hello()``: the handshake's kernel-side fields (capabilities, session id,
        action names). ``handle_action(data, comm_id)``: exactly one reply for one
        ``action`` (request ids are de-duplicated per ``comm_id``).
        ``snapshot(deliver)``: calls ``deliver(header, buffers)`` once with the stream's
        snapshot, at the moment no ``series`` message can slip in between (the comm joins
        the broadcast inside ``deliver``). ``on_error(site)``: count a caught failure.
        ``after_request()``: called once a panel's request (open or action) has been
        answered, on the thread that answered it (shell_status.py's re-assert)."""
        self._manager = comm_manager
        self._hello = hello
        self._handle_action = handle_action
        self._write_snapshot = snapshot
        self._on_error = on_error
        self._after_request = after_request
        self._comms: dict[str, Comm] = {}
        self._lock = threading.Lock()
        self._registered = False
        self._local = threading.local()
        #: Which subshell each comm's panel talks to us on (subshell_routes.py).
        self._routes = SubshellRoutes()
        #: client_id -> comm_id of the live comm opened with it (R46).
        self._clients: dict[str, str] = {}
        self._snapshot_parts: list[Callable[[], Sequence[Message]]] = []
        self._observers: tuple[Callable[[Message, Buffers | None], None], ...] = ()

    # --- lifecycle -----------------------------------------------------------------

    def register(self) -> None:
        self._manager.register_target(COMM_TARGET, self._on_open)
        self._registered = True

    def announce(self, session_id: str) -> None:
        """Tell every frontend of the kernel that the kernel side is (again) loaded: a
        kernel-initiated comm on ``LOADED_TARGET``, closed at once (a frontend without
        that target just sees it closed). Never raises."""
        try:
            from comm import create_comm

            loaded = create_comm(
                target_name=LOADED_TARGET,
                data={
                    "method": "loaded",
                    "protocol_version": PROTOCOL_VERSION,
                    "session_id": session_id,
                },
            )
            loaded.close()
        except Exception:
            self._on_error("announce")

    def close(self) -> None:
        """Unregister the target and close every comm (the panels say 'not loaded')."""
        if self._registered:
            try:
                self._manager.unregister_target(COMM_TARGET, self._on_open)
            except Exception:
                targets = getattr(self._manager, "targets", {})
                targets.pop(COMM_TARGET, None)
            self._registered = False
        with self._lock:
            comms, self._comms = list(self._comms.values()), {}
        for c in comms:
            try:
                c.close()
            except Exception:
                pass

    @property
    def count(self) -> int:
        with self._lock:
            return len(self._comms)

    # --- sending -------------------------------------------------------------------

    def _send(self, comm: Comm, data: Message, buffers: Buffers | None = None) -> bool:
        """Send one message; False (counted) when it could not be sent."""
        sent = True
        try:
            comm.send(data=data, buffers=buffers or None)
        except Exception:
            sent = False
            self._on_error("send")
            if getattr(comm, "_closed", False):
                self._forget(comm)
        self._routes.keep(comm)
        return sent

    def observe(self, fn: Callable[[Message, Buffers | None], None]) -> Callable[[], None]:
        """Call ``fn(data, buffers)`` with every broadcast, with or without a comm open
        (the run record, record/writer.py). ``fn`` must be quick and never raise; it runs
        on the broadcasting thread. Returns the function that removes it."""
        self._observers = (*self._observers, fn)

        def remove() -> None:
            self._observers = tuple(f for f in self._observers if f is not fn)

        return remove

    def broadcast(self, data: Message, buffers: Buffers | None = None) -> None:
        """Send one message to every live comm (and show it to the observers). Never raises."""
        for fn in self._observers:
            try:
                fn(data, buffers)
            except Exception:
                self._on_error("observe")
        with self._lock:
            comms = list(self._comms.values())
        for c in comms:
            self._send(c, data, buffers)

    def _forget(self, comm: Comm) -> None:
        self._routes.forget(getattr(comm, "comm_id", ""))
        with self._lock:
            # id(comm): a key no comm has (every comm joins under its comm_id).
            self._comms.pop(getattr(comm, "comm_id", id(comm)), None)  # type: ignore[arg-type]

    # --- handlers (may run on a subshell thread) -------------------------------------

    def _on_open(self, comm: Comm, msg: JupyterMsg) -> None:
        try:
            self._open(comm, msg)
        finally:
            self._answered()

    def _answered(self) -> None:
        try:
            self._after_request()
        except Exception:
            self._on_error("after_request")

    def _open(self, comm: Comm, msg: JupyterMsg) -> None:
        self._routes.route_as_sent(comm)
        self._routes.note(comm, msg)
        data = _data(msg) or {}
        client_version = data.get("protocol_version") if isinstance(data, dict) else None
        accepted = isinstance(client_version, str) and major(client_version) == major(
            PROTOCOL_VERSION
        )
        self._send(comm, self.hello(accepted))
        if not accepted:
            # Strict MAJOR.MINOR in ASCII digits: anything else is answered, then closed.
            shown = wire_safe(client_version[:32]) if isinstance(client_version, str) else "none"
            if isinstance(client_version, str) and major(client_version) is None:
                shown = f"an unreadable protocol version {shown!r}"
            self._send(
                comm,
                {
                    "method": "error",
                    "request_id": None,
                    "code": "protocol_mismatch",
                    "message": (
                        f"Protocol mismatch: the lab extension speaks {shown}, the kernel "
                        f"package jupyterlab_torchdbg {__version__} speaks {PROTOCOL_VERSION}. "
                        "Install the same version of jupyterlab_torchdbg in the kernel's "
                        "environment and in JupyterLab's."
                    ),
                },
            )
            try:
                comm.close()
            except Exception:
                pass
            return

        def on_msg(m: JupyterMsg) -> None:
            self._on_msg_answered(comm, m)

        def on_close(m: JupyterMsg) -> None:
            self._forget(comm)

        comm.on_msg(on_msg)
        comm.on_close(on_close)
        self._replace_client(comm, data if isinstance(data, dict) else {})
        self.send_snapshot(comm, join=True)

    def _replace_client(self, comm: Comm, data: Mapping[str, object]) -> None:
        """R46: a comm opened with a ``client_id`` a live comm already has replaces it.

        The id names a browser tab and survives its reloads, so the older comm is what a
        reloaded, crashed or disconnected page left behind; kept, it would get every
        broadcast for the kernel's lifetime. Comms without an id (nbclient, older panels)
        are never closed here, and different ids are different clients (R05).
        """
        client_id = data.get("client_id")
        if not isinstance(client_id, str) or not _CLIENT_ID.fullmatch(client_id):
            return
        with self._lock:
            # Drop ids whose comm is gone, so the table stays as small as the live set.
            self._clients = {k: v for k, v in self._clients.items() if v in self._comms}
            old_id = self._clients.get(client_id)
            self._clients[client_id] = comm.comm_id
            old = None
            if old_id is not None and old_id != comm.comm_id:
                old = self._comms.pop(old_id, None)
        if old is None:
            return
        self._routes.forget(old.comm_id)
        try:
            old.close()
        except Exception:
            self._on_error("close")

    def hello(self, accepted: bool) -> dict[str, object]:
        return {
            "method": "hello",
            "protocol_version": PROTOCOL_VERSION,
            "package_version": __version__,
            **self._hello(),
            "accepted": accepted,
        }

    def send_snapshot(self, comm: Comm, join: bool = False) -> None:
        """Send the stream's snapshot (then the registered parts) to one comm.

        ``join``: a new comm, added to the broadcast together with its snapshot, so no
        ``series`` message falls between the two (see ``Stream.send_snapshot``).
        """

        def deliver(header: Message, buffers: Buffers) -> None:
            self._send(comm, header, buffers)
            if join:
                with self._lock:
                    self._comms[comm.comm_id] = comm

        try:
            self._write_snapshot(deliver)
        except Exception:
            self._on_error("snapshot")
            if join:  # still stream to it; its panel resyncs on the first unknown block
                with self._lock:
                    self._comms[comm.comm_id] = comm
            return
        for part in self.snapshot_parts():
            self._send(comm, part)

    def resend_snapshot(self) -> bool:
        """During an action handler: send a fresh snapshot to the requesting comm only."""
        comm = getattr(self._local, "comm", None)
        if comm is None:
            return False
        self.send_snapshot(comm)
        return True

    # --- snapshot parts (R06) ------------------------------------------------------------

    def add_snapshot_part(self, part: Callable[[], Sequence[Message]]) -> Callable[[], None]:
        """Register a feature's contribution to the snapshot a (re)connecting panel gets.

        ``part()`` returns whole messages (e.g. the last ``exception`` with ``replay: true``)
        sent right after ``snapshot`` on that comm only, never broadcast. Returns a
        function that removes the part (for the feature's cleanup).
        """
        self._snapshot_parts.append(part)

        def remove() -> None:
            if part in self._snapshot_parts:
                self._snapshot_parts.remove(part)

        return remove

    def snapshot_parts(self) -> list[dict[str, object]]:
        """Every registered part's messages, JSON-safe; a failing part is counted, skipped."""
        out: list[dict[str, object]] = []
        for part in list(self._snapshot_parts):
            try:
                out.extend(jsonable(m) for m in part())
            except Exception:
                self._on_error("snapshot_part")
        return out

    def _on_msg_answered(self, comm: Comm, msg: JupyterMsg) -> None:
        try:
            self._on_msg(comm, msg)
        finally:
            self._answered()

    def _on_msg(self, comm: Comm, msg: JupyterMsg) -> None:
        """Exactly one reply per request message, on this comm, for any input (R43).

        The reply is made encodable (``jsonable``: lone surrogates echoed from the request
        become ``\\udXXX`` text); should the handler or the send still fail, a ``failed``
        error with the same request id goes instead. Request ids are de-duplicated per
        comm (the registry keys its reply cache by this comm's id).
        """
        self._routes.note(comm, msg)
        data: object = None
        try:
            data = _data(msg)
            if isinstance(data, dict) and data.get("method") == "action":
                self._local.comm = comm
                try:
                    reply = self._handle_action(data, str(getattr(comm, "comm_id", "")))
                finally:
                    self._local.comm = None
            else:
                reply = {
                    "method": "error",
                    "request_id": None,
                    "code": "malformed",
                    "message": "expected a message with method 'action'",
                }
            if self._send(comm, jsonable(reply)):
                return
            why = "the reply could not be sent"
        except Exception:
            self._on_error("dispatch")
            why = "the request could not be handled"
        if getattr(comm, "_closed", False):
            return  # nobody left to answer
        self._send(
            comm,
            {
                "method": "error",
                "request_id": echoable_request_id(data),
                "code": "failed",
                "message": f"{why} (an internal error of jupyterlab_torchdbg, counted)",
            },
        )
