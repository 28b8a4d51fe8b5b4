"""The signed transport between the kernel and its worker processes.

Jupyter's own machinery, nothing home-made: every message is a
``jupyter_client.session.Session`` message (HMAC-SHA256 over header, parent, metadata
and content, with the session's replay check on the receiving side) carried over pyzmq.
The kernel binds one ROUTER (endpoint.py); each worker process connects one DEALER
(agent.py). Where the endpoint is, and its key, travel in the environment every process
the notebook starts inherits:

- ``TORCHDBG_ENDPOINT``: ``tcp://127.0.0.1:PORT`` (the kernel's ROUTER);
- ``TORCHDBG_KEY``: the HMAC key, 64 hex digits (32 random bytes from ``secrets``);
- ``TORCHDBG_JOB_CELL``: the notebook cell running when the job started (optional);
- ``TORCHDBG_LISTEN``: read by the kernel only: the interface to bind (``0.0.0.0`` for
  workers on other hosts; default ``127.0.0.1``). Without the key nothing is accepted.

Sends never block (``NOBLOCK``; a full queue drops the message and says so), and
floats that JSON cannot carry go as the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"`` (``finite_or_special``), as in the panel protocol.
"""

from __future__ import annotations

import math
import secrets
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import zmq
    from jupyter_client.session import Session

ENDPOINT_ENV = "TORCHDBG_ENDPOINT"
KEY_ENV = "TORCHDBG_KEY"
CELL_ENV = "TORCHDBG_JOB_CELL"
LISTEN_ENV = "TORCHDBG_LISTEN"
#: Loopback unless TORCHDBG_LISTEN says otherwise.
DEFAULT_HOST = "127.0.0.1"
#: Messages a socket queues for a slow or absent peer before dropping more.
HWM = 1000
#: Largest message the kernel takes (a peer sending more is disconnected): bounds what
#: a process without the key can make the kernel hold before the signature check.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
#: How long a closing worker socket keeps trying to deliver what is queued (ms).
LINGER_MS = 1500


def new_key() -> str:
    """A fresh session key: 32 random bytes as hex."""
    return secrets.token_hex(32)


def session(key: str) -> Session:
    """A Jupyter session signing with ``key`` (HMAC-SHA256), checking replays."""
    from jupyter_client.session import Session

    return Session(key=key.encode("ascii"), signature_scheme="hmac-sha256", username="torchdbg")


def finite_or_special(x: float) -> float | str:
    """A float for JSON: NaN and the infinities as the protocol's strings."""
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return "NaN"
    return "Infinity" if x > 0 else "-Infinity"


def send(
    sess: Session,
    sock: zmq.Socket[Any],
    msg_type: str,
    content: dict[str, Any],
    ident: bytes | None = None,
) -> bool:
    """Sign and send one message without blocking; False if the queue was full."""
    import zmq

    msg = sess.msg(msg_type, content)
    parts = sess.serialize(msg, ident=ident)
    try:
        sock.send_multipart(parts, flags=zmq.NOBLOCK)
    except zmq.Again:
        return False
    return True


def recv(sess: Session, sock: zmq.Socket[Any]) -> tuple[bytes | None, str, dict[str, Any]] | None:
    """One waiting message as ``(sender identity or None, msg_type, content)``; None if
    nothing waits. A message whose signature fails (wrong key, replay, tampering) or
    that is not a Jupyter message raises ValueError (the caller counts it, drops it)."""
    import zmq

    try:
        frames = sock.recv_multipart(flags=zmq.NOBLOCK)
    except zmq.Again:
        return None
    try:
        idents, parts = sess.feed_identities(frames)
        msg = sess.deserialize(parts)
    except (ValueError, TypeError, KeyError, IndexError) as e:
        raise ValueError(f"refused: {e}") from None
    header = msg.get("header")
    content = msg.get("content")
    msg_type = header.get("msg_type") if isinstance(header, dict) else None
    if not isinstance(msg_type, str) or not isinstance(content, dict):
        raise ValueError("refused: not a message")
    ident = bytes(idents[0]) if idents else None
    return ident, msg_type, content


def bind(host: str | None = None) -> tuple[zmq.Context[Any], zmq.Socket[Any], int]:
    """A ROUTER bound to a random port on ``host``: (context, socket, port)."""
    import zmq

    ctx: zmq.Context[Any] = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, HWM)
        sock.setsockopt(zmq.RCVHWM, HWM)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        port = sock.bind_to_random_port(f"tcp://{host or DEFAULT_HOST}")
    except Exception:
        sock.close(0)
        ctx.term()
        raise
    return ctx, sock, port


def connect(address: str) -> tuple[zmq.Context[Any], zmq.Socket[Any]]:
    """A DEALER connected to the kernel's endpoint: (context, socket). Its own context:
    never the user's (``zmq.Context.instance()``), never one inherited across a fork."""
    import zmq

    ctx: zmq.Context[Any] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    # zmq's own pings: a kernel gone without closing (host down) counts as disconnected
    sock.setsockopt(zmq.HEARTBEAT_IVL, 1000)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 5000)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.connect(address)
    return ctx, sock
