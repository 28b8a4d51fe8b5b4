"""Where the kernel's ROUTER listens (R55): an owner-only ``ipc://`` socket by default,
TCP only when ``TORCHDBG_LISTEN`` asks for it.

- Unset (or empty): ``ipc://<dir>/ranks`` in a fresh directory of mode 0700 (under
  ``$XDG_RUNTIME_DIR`` when it exists, else the system's temp directory): no port at
  all, and no other user can reach the socket. Where the platform has no ipc transport,
  loopback TCP on a random port.
- ``TORCHDBG_LISTEN`` (for workers on other hosts): ``HOST`` or ``HOST:PORT``, with
  HOST an IPv4 address, an IPv6 address (``[ADDR]:PORT`` with a port), ``0.0.0.0``,
  ``*`` or ``::`` (every interface), ``localhost`` or an interface name; PORT 1 to 65535
  (a random one without). A ``tcp://`` prefix is allowed.

A value that cannot be listened on raises ``ListenError``, whose text says what was
wrong and what to set instead: never a silent "off".
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..wire.transport import LISTEN_ENV

if TYPE_CHECKING:
    import zmq

#: ``sockaddr_un.sun_path`` holds 108 bytes on Linux (104 on macOS), NUL included.
MAX_IPC_PATH = 100
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
_HINT = (
    "set it to one of this host's addresses, 0.0.0.0 or :: (every interface), "
    "optionally with :PORT, or unset it to keep the workers on this machine"
)


class ListenError(ValueError):
    """``TORCHDBG_LISTEN`` names nothing this kernel can listen on."""

    def __init__(self, value: str, why: str) -> None:
        super().__init__(
            f"{LISTEN_ENV}={value!r} cannot be listened on ({why}): {_HINT}. "
            "Multi-process monitoring is off until then."
        )


@dataclass
class Binding:
    """What the ROUTER is bound to."""

    #: ``ipc`` (this machine's processes of this user only) or ``tcp``.
    transport: str
    #: What local workers connect to (``TORCHDBG_ENDPOINT``).
    address: str
    #: The interface bound (tcp), None for ipc.
    host: str | None = None
    port: int = 0
    #: The 0700 directory holding the ipc socket (removed by ``release``).
    directory: str | None = None


def parse(value: str) -> tuple[str, int | None, bool]:
    """``TORCHDBG_LISTEN`` as (host for zmq's bind, port or None, IPv6); ListenError."""
    text = value.strip()
    if text.startswith("tcp://"):
        text = text[len("tcp://") :]
    port_text: str | None = None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ListenError(value, "an IPv6 address opened with '[' is not closed")
        host, rest = text[1:end], text[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ListenError(value, f"unexpected {rest!r} after the address")
            port_text = rest[1:]
    elif text.count(":") >= 2:
        host = text  # a bare IPv6 address (no port)
    elif ":" in text:
        host, port_text = text.split(":", 1)
    else:
        host = text
    host = "127.0.0.1" if host == "localhost" else host
    if not host:
        raise ListenError(value, "no host")
    ipv6 = False
    if host != "*":
        try:
            ipv6 = ipaddress.ip_address(host).version == 6
        except ValueError:
            if not _NAME.match(host) or re.fullmatch(r"[0-9.]+", host):
                raise ListenError(value, f"{host!r} is not an IP address") from None
    port: int | None = None
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ListenError(value, f"the port {port_text!r} is not a number from 1 to 65535")
        port = int(port_text)
    return host, port, ipv6


def bind(sock: zmq.Socket[bytes], listen: str | None) -> Binding:
    """Bind ``sock``: ipc when ``listen`` is empty, else TCP on it (ListenError)."""
    import zmq

    if not listen or not listen.strip():
        if zmq.has("ipc") and os.name == "posix":
            return _bind_ipc(sock)
        local = sock.bind_to_random_port("tcp://127.0.0.1")
        return Binding("tcp", f"tcp://127.0.0.1:{local}", "127.0.0.1", local)
    host, port, ipv6 = parse(listen)
    if ipv6:
        sock.setsockopt(zmq.IPV6, 1)
    zhost = f"[{host}]" if ipv6 else host
    try:
        if port is None:
            bound = sock.bind_to_random_port(f"tcp://{zhost}")
        else:
            sock.bind(f"tcp://{zhost}:{port}")
            bound = port
    except zmq.ZMQError as e:
        raise ListenError(listen, e.strerror) from None
    return Binding("tcp", _local_address(sock, host, bound), host, bound)


def _local_address(sock: zmq.Socket[bytes], host: str, port: int) -> str:
    """The address a worker on this machine connects to."""
    import zmq

    last = sock.getsockopt(zmq.LAST_ENDPOINT)
    bound = last.decode() if isinstance(last, bytes) else f"tcp://{host}:{port}"
    bound_host = bound[len("tcp://") :].rsplit(":", 1)[0]
    if bound_host in ("0.0.0.0", "*"):
        return f"tcp://127.0.0.1:{port}"
    if bound_host in ("[::]", "[*]", "::"):
        return f"tcp://[::1]:{port}"
    return bound


def _runtime_root() -> str | None:
    root = os.environ.get("XDG_RUNTIME_DIR")
    if root and os.path.isdir(root) and len(root) < MAX_IPC_PATH - 30:
        return root
    return None


def _bind_ipc(sock: zmq.Socket[bytes]) -> Binding:
    directory = tempfile.mkdtemp(prefix="torchdbg-", dir=_runtime_root())
    try:
        os.chmod(directory, 0o700)  # mkdtemp's mode already; never looser
        path = os.path.join(directory, "ranks")
        if len(path.encode()) > MAX_IPC_PATH:
            raise OSError(f"the socket path {path!r} is too long for ipc")
        sock.bind(f"ipc://{path}")
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return Binding("ipc", f"ipc://{path}", directory=directory)


def release(binding: Binding) -> None:
    """Remove the ipc socket and its directory (never raises)."""
    if binding.directory is not None:
        with contextlib.suppress(Exception):
            shutil.rmtree(binding.directory, ignore_errors=True)
