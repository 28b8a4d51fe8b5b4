"""What to export on another host so that its ranks attach to this kernel
(``jupyterlab_torchdbg.ranks_env()``; README: "Ranks on several hosts").

The processes the notebook starts inherit the endpoint (worker_env.py). A host the
notebook does not start processes on needs the same variables, with the endpoint's
address as that host reaches it: the kernel must listen on TCP (``TORCHDBG_LISTEN`` set
before ``%load_ext``); bound to every interface (``0.0.0.0``), the address local workers
use (loopback) is replaced by ``host`` (else this machine's name).
"""

from __future__ import annotations

import os
import shlex
import socket

from ..wire import transport as wire
from ..wire.envelope import JOB_ENV, job_of
from .worker_env import BOOT_DIR

_LOOPBACK = ("127.0.0.1", "[::1]", "localhost")


class NoRemoteEndpoint(RuntimeError):
    """The kernel has no endpoint other hosts can reach."""


class RanksEnv(dict[str, str]):
    """The variables (a dict: ``subprocess``'s ``env``, ``os.environ.update``); as a
    string, shell lines: ``export NAME=value``, PYTHONPATH prepended to the host's own."""

    def __str__(self) -> str:
        lines = []
        for name, value in self.items():
            if name == "PYTHONPATH":
                lines.append(
                    f'export PYTHONPATH={shlex.quote(value)}"${{PYTHONPATH:+:$PYTHONPATH}}"'
                )
            else:
                lines.append(f"export {name}={shlex.quote(value)}")
        return "\n".join(lines)


def ranks_env(host: str | None = None) -> RanksEnv:
    """The variables every rank on another host needs, as a dict: the endpoint (TCP, as
    that host reaches it), the key, the job id, and ``PYTHONPATH`` with the boot
    directory (the same install path on every host; else call
    ``jupyterlab_torchdbg.attach()`` in the script). Raises ``NoRemoteEndpoint`` when the
    extension is not loaded or listens on an ipc socket (this machine only)."""
    address = os.environ.get(wire.ENDPOINT_ENV, "")
    key = os.environ.get(wire.KEY_ENV, "")
    if not address or not key:
        raise NoRemoteEndpoint(
            "no ranks endpoint: load the extension first (%load_ext jupyterlab_torchdbg)"
        )
    if not address.startswith("tcp://"):
        raise NoRemoteEndpoint(
            f"the kernel listens on {address.split('://')[0]} (this machine only): set "
            f"{wire.LISTEN_ENV}=0.0.0.0:PORT (or this host's address) in the kernel's "
            "environment before loading the extension"
        )
    bound, _, port = address[len("tcp://") :].rpartition(":")
    if bound in _LOOPBACK or host:
        reach = host or socket.getfqdn()
        bound = f"[{reach}]" if ":" in reach and not reach.startswith("[") else reach
    return RanksEnv(
        {
            wire.ENDPOINT_ENV: f"tcp://{bound}:{port}",
            wire.KEY_ENV: key,
            JOB_ENV: os.environ.get(JOB_ENV) or job_of(key),
            "PYTHONPATH": BOOT_DIR,
        }
    )
