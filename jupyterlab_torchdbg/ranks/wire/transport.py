"""The signed transport between the kernel and its worker processes.

Jupyter's own machinery, nothing home-made: every message is a
``jupyter_client.session.Session`` message (HMAC-SHA256 over header, parent, metadata
and content, with the session's replay check on the receiving side) carried over pyzmq.
The kernel binds one ROUTER (endpoint.py); each worker process connects one DEALER
(agent.py). Where the endpoint is, and its key, travel in the environment every process
the notebook starts inherits:

- ``TORCHDBG_ENDPOINT``: ``ipc://<0700 dir>/ranks`` (the kernel's ROUTER), or
  ``tcp://HOST:PORT`` when the kernel was asked to listen on TCP;
- ``TORCHDBG_KEY``: the HMAC key, 64 hex digits (32 random bytes from ``secrets``);
- ``TORCHDBG_JOB_CELL``: the notebook cell running when the job started (optional);
- ``TORCHDBG_JOB_ID``: the kernel's job id every message names (envelope.py; derived
  from the key where unset);
- ``TORCHDBG_LISTEN``: read by the kernel only: the interface to listen on for workers
  on other hosts (listen.py); unset, the endpoint is an owner-only ipc socket.

A connection is admitted only with a token derived from the key (``connect_token``,
checked by the endpoint's ZAP handler during zmq's PLAIN handshake): a process without
the key never gets a frame into the kernel's queue (R55). Each message is then read one
frame at a time and dropped, without keeping its frames, once over ``MAX_FRAMES`` or
``MAX_MESSAGE_BYTES`` (a single frame over that is refused by libzmq itself, which drops
the connection), before any HMAC or JSON; what fails raises ``Refused`` with its reason.
Every message carries the envelope (envelope.py: wire version, job, sender, counter) in
its signed metadata; the kernel refuses another version, another job, a replay (R58,
R59). wire.schema.json beside this file describes the envelope and each message kind.

Sends never block (``NOBLOCK``; a full queue drops the message and says so), and
floats that JSON cannot carry go as the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"`` (``finite_or_special``), as in the panel protocol.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .envelope import Guard, Refusal, Stamp, job_for

if TYPE_CHECKING:
    import zmq
    from jupyter_client.session import Session

    from ...protocol.json_types import JsonObject

ENDPOINT_ENV = "TORCHDBG_ENDPOINT"
KEY_ENV = "TORCHDBG_KEY"
CELL_ENV = "TORCHDBG_JOB_CELL"
LISTEN_ENV = "TORCHDBG_LISTEN"
#: Messages a socket queues for a slow or absent peer before dropping more.
HWM = 1000
#: Largest message taken, all frames together (one frame over it: the peer is dropped
#: by libzmq, ``MAXMSGSIZE``). A worker's largest is an exception body, a few MB.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Most frames in a message: a signed one has 7 (identity, delimiter, signature, header,
#: parent, metadata, content).
MAX_FRAMES = 16
#: The PLAIN user name workers present (the password is ``connect_token(key)``).
USER = b"torchdbg"
DELIM = b"<IDS|MSG>"
#: How long a closing worker socket keeps trying to deliver what is queued (ms).
LINGER_MS = 1500


def new_key() -> str:
    """A fresh session key: 32 random bytes as hex."""
    return secrets.token_hex(32)


def session(key: str, job: str | None = None) -> Session:
    """A Jupyter session signing with ``key`` (HMAC-SHA256), checking replays, whose
    messages name ``job`` (else ``$TORCHDBG_JOB_ID``, else the key's: envelope.job_for)
    under a sender id of its own."""
    from jupyter_client.session import Session

    sess = Session(key=key.encode("ascii"), signature_scheme="hmac-sha256", username="torchdbg")
    sess._torchdbg_stamp = Stamp(job_for(key, job))  # type: ignore[attr-defined]
    return sess


def stamp_of(sess: Session) -> Stamp:
    """The session's envelope (one made on first use for a session not from ``session``)."""
    stamp = getattr(sess, "_torchdbg_stamp", None)
    if not isinstance(stamp, Stamp):
        stamp = Stamp(job_for(sess.key.decode("ascii")))
        sess._torchdbg_stamp = stamp  # type: ignore[attr-defined]
    return stamp


def finite_or_special(x: float) -> float | str:
    """A float for JSON: NaN and the infinities as the protocol's strings."""
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return "NaN"
    return "Infinity" if x > 0 else "-Infinity"


def signed(
    sess: Session, msg_type: str, content: Mapping[str, object], ident: bytes | None = None
) -> list[bytes]:
    """One message's frames, signed, with the session's next envelope."""
    msg = sess.msg(msg_type, dict(content), metadata=dict(stamp_of(sess).next()))
    return list(sess.serialize(msg, ident=ident))


def send(
    sess: Session,
    sock: zmq.Socket[bytes],
    msg_type: str,
    content: Mapping[str, object],
    ident: bytes | None = None,
) -> bool:
    """Sign and send one message without blocking; False if the queue was full."""
    import zmq

    parts = signed(sess, msg_type, content, ident)
    try:
        sock.send_multipart(parts, flags=zmq.NOBLOCK)
    except zmq.Again:
        return False
    return True


class Refused(ValueError):
    """A message (or connection) refused, with a short reason: ``frames``, ``size``,
    ``malformed``, ``signature``, ``replay``, ``version``, ``job``; ``detail``: a
    sentence for the user where there is one; ``sender``: the envelope's sender id once
    the message was verified (an envelope refusal)."""

    def __init__(self, reason: str, detail: str = "", sender: str | None = None) -> None:
        super().__init__(f"refused: {reason}" + (f": {detail}" if detail else ""))
        self.reason = reason
        self.detail = detail
        self.sender = sender


def connect_token(key: str) -> bytes:
    """What a worker presents to connect: an HMAC of a fixed label under the key (the key
    itself never crosses the wire; the token alone cannot sign a message)."""
    return hmac.new(key.encode("ascii"), b"torchdbg-connect", hashlib.sha256).hexdigest().encode()


def read_frames(
    sock: zmq.Socket[bytes], max_frames: int = MAX_FRAMES, max_bytes: int = MAX_MESSAGE_BYTES
) -> list[zmq.Frame] | None:
    """One waiting message's frames (zero-copy), or None if nothing waits. Over the
    limits, the rest of the message is read and dropped frame by frame (none kept) and
    ``Refused("frames" | "size")`` is raised."""
    import zmq

    try:
        first = sock.recv(flags=zmq.NOBLOCK, copy=False)
    except zmq.Again:
        return None
    frames = [first]
    size = len(first)
    reason = None
    more = first.more
    while more:
        frame = sock.recv(copy=False)  # the rest is there: zmq delivers whole messages
        more = frame.more
        if reason is not None:
            continue
        size += len(frame)
        if len(frames) >= max_frames:
            reason = "frames"
        elif size > max_bytes:
            reason = "size"
        if reason is not None:
            frames.clear()
        else:
            frames.append(frame)
    if reason is not None:
        raise Refused(reason)
    return frames


def verify(
    sess: Session, frames: Sequence[zmq.Frame | bytes], guard: Guard | None = None
) -> tuple[bytes | None, str, JsonObject]:
    """``(sender identity or None, msg_type, content)`` of a message's frames, cheapest
    checks first (shape, signature length, replay), then the HMAC, and only then JSON;
    with a ``guard`` (the kernel's), then the envelope: wire version, job, counter.
    Raises ``Refused``."""
    raw = [f if isinstance(f, bytes) else f.bytes for f in frames]
    try:
        at = raw.index(DELIM)
    except ValueError:
        raise Refused("malformed") from None
    idents, parts = raw[:at], raw[at + 1 :]
    if len(parts) < 5:
        raise Refused("malformed")
    signature = parts[0]
    if len(signature) != 64:  # hex SHA-256; empty when unsigned
        raise Refused("signature")
    keyed = _keyed(sess)
    if signature in keyed.history:
        raise Refused("replay")
    if not hmac.compare_digest(signature, keyed.sign(parts[1:5])):
        raise Refused("signature")
    keyed.remember(signature)
    # Signed by the key: decoded here rather than by Session.deserialize, which checks
    # the signature a second time and parses every date in the header (more than half
    # of a message's cost on the kernel's side, issue #25); the parent header is unused.
    # (UTF-8, as Jupyter's packer writes them; json.loads would first guess the encoding.)
    try:
        header = _decode(parts[1].decode("utf-8", "surrogatepass"))
        metadata = _decode(parts[3].decode("utf-8", "surrogatepass"))
        content = _decode(parts[4].decode("utf-8", "surrogatepass"))
    except (ValueError, TypeError):
        raise Refused("malformed") from None
    msg_type = header.get("msg_type") if isinstance(header, dict) else None
    if not isinstance(msg_type, str) or not isinstance(content, dict):
        raise Refused("malformed")
    if guard is not None:
        try:
            guard.check(metadata)
        except Refusal as r:
            sender = metadata.get("sender") if isinstance(metadata, dict) else None
            raise Refused(r.reason, r.detail, sender if isinstance(sender, str) else None) from None
    return (idents[0] if idents else None), msg_type, content


_decode = json.JSONDecoder().decode


class _Keyed:
    """What ``verify`` reads of a session for every message, read once: its HMAC (as
    ``Session.sign`` computes it) and its replay history (``Session.digest_history``,
    the same set). Each read of a session's trait costs more than the HMAC itself."""

    def __init__(self, sess: Session) -> None:
        auth = sess.auth
        if auth is None:
            raise Refused("signature", "this session has no key")
        self.auth = auth
        self.history: set[bytes] = sess.digest_history
        self.size: int = sess.digest_history_size

    def sign(self, parts: Sequence[bytes]) -> bytes:
        h = self.auth.copy()
        for part in parts:
            h.update(part)
        return h.hexdigest().encode()

    def remember(self, signature: bytes) -> None:
        """Jupyter's replay check: the signatures seen, bounded as the Session bounds them
        (the oldest half of an unordered set is not known: on overflow it starts afresh;
        the envelope's per-sender counter still refuses every replay on the kernel's side,
        R58)."""
        history = self.history
        if len(history) >= self.size:
            history.clear()
        history.add(signature)


def _keyed(sess: Session) -> _Keyed:
    """The session's ``_Keyed``, made on first use (a session's key and its history set
    are made with it and never replaced: ``session``)."""
    keyed = getattr(sess, "_torchdbg_keyed", None)
    if not isinstance(keyed, _Keyed):
        keyed = _Keyed(sess)
        sess._torchdbg_keyed = keyed  # type: ignore[attr-defined]
    return keyed


def recv(sess: Session, sock: zmq.Socket[bytes]) -> tuple[bytes | None, str, JsonObject] | None:
    """One waiting message as ``(sender identity or None, msg_type, content)``; None if
    nothing waits. A message over the limits, not signed with the key (wrong key,
    replay, tampering) or not a Jupyter message raises ``Refused`` (a ValueError: the
    caller counts it, drops it)."""
    frames = read_frames(sock)
    if frames is None:
        return None
    return verify(sess, frames)


def connect(address: str, key: str) -> tuple[zmq.Context[zmq.Socket[bytes]], zmq.Socket[bytes]]:
    """A DEALER connected to the kernel's endpoint, presenting the key's connect token:
    (context, socket). Its own context: never the user's (``zmq.Context.instance()``),
    never one inherited across a fork."""
    import zmq

    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    if not address.startswith("ipc://"):
        # zmq's own pings: a kernel gone without closing (host down) counts as
        # disconnected within 15 s. Not over ipc: the kernel is on this host, and its
        # socket closes with its process however it ends; each ping costs the kernel's I/O
        # thread a pong (every second, 256 ranks' pongs were 0.5% of a core, issue #25).
        sock.setsockopt(zmq.HEARTBEAT_IVL, 5000)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 10000)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.PLAIN_USERNAME, USER)
    sock.setsockopt(zmq.PLAIN_PASSWORD, connect_token(key))
    if address.startswith("tcp://["):
        sock.setsockopt(zmq.IPV6, 1)
    sock.connect(address)
    return ctx, sock
