"""What every rank message carries besides its content: the wire's envelope (R58, R59).

The envelope is the signed Jupyter message's ``metadata`` (inside the HMAC, with the
header and the content)::

    {"wire": 4, "job": "<16 hex>", "sender": "<16 hex>", "seq": 1}

- ``wire``: the wire version (``WIRE_VERSION``, the ``x-wire-version`` of
  wire.schema.json beside this file). The kernel refuses every message of another
  version, a message without one (a worker from before the handshake) included, with a
  reason that names both versions (R59).
- ``job``: the job this message belongs to: ``TORCHDBG_JOB_ID`` where the kernel put it
  (worker_env.py, ``ranks_env()``), else derived from the key (``job_of``), so that
  ``attach(endpoint, key)`` with two values still names the kernel's job. A message
  signed with the right key for another job is refused (``job``, R58).
- ``sender``: 8 random bytes a sending session draws once (one per worker process
  and connection); ``seq``: that session's message counter, 1, 2, 3, ... The kernel
  remembers the last ``seq`` of the newest ``MAX_SENDERS`` senders and refuses a message
  whose ``seq`` is not above it: the same bytes sent again, or an older message of the
  same sender, is a ``replay`` (R58). Jupyter's own digest history refuses the same
  signature too; this check also holds once that history is culled, and tells an old
  message from a new one without keeping them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .messages import Envelope

#: The wire's version: wire.schema.json's ``x-wire-version`` (a test holds them equal).
#: 1 was the wire before the envelope (no metadata); 2 sent a rank's layer norms as a
#: list of numbers only (3: as ``packed`` too, wire/packed.py); 3 sent the layer names
#: in every report (4: by ``layout``, the names only now and then).
WIRE_VERSION = 4
JOB_ENV = "TORCHDBG_JOB_ID"
#: Senders whose last ``seq`` the kernel remembers (the least recently heard forgotten).
MAX_SENDERS = 16384
_HEX16 = re.compile(r"[0-9a-f]{16}\Z")


class Refusal(ValueError):
    """An envelope refused: ``reason`` (``version``, ``job``, ``replay``, ``malformed``)
    and a sentence for the user (``detail``)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"refused: {reason}: {detail}")
        self.reason = reason
        self.detail = detail


def job_of(key: str) -> str:
    """The job a key names when no job id is given: 16 hex digits of an HMAC under it."""
    return hmac.new(key.encode("ascii"), b"torchdbg-job", hashlib.sha256).hexdigest()[:16]


def job_for(key: str, job: str | None = None) -> str:
    """The job a sender names: ``job``, else ``$TORCHDBG_JOB_ID``, else ``job_of(key)``."""
    return job or os.environ.get(JOB_ENV) or job_of(key)


class Stamp:
    """A sending session's envelope: its job, its sender id, its counter."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.sender = secrets.token_hex(8)
        self.seq = 0

    def next(self) -> Envelope:
        self.seq += 1
        return {"wire": WIRE_VERSION, "job": self.job, "sender": self.sender, "seq": self.seq}


class Guard:
    """The kernel's check of each verified message's envelope (one thread: the
    endpoint's). ``check`` raises ``Refusal``; otherwise records the sender's ``seq``."""

    def __init__(self, job: str, max_senders: int = MAX_SENDERS) -> None:
        self.job = job
        self._last: OrderedDict[str, int] = OrderedDict()
        self._max = max_senders

    def check(self, metadata: object) -> str:
        """The sender of an acceptable envelope; raises ``Refusal``."""
        meta = metadata if isinstance(metadata, dict) else {}
        version = meta.get("wire")
        if version != WIRE_VERSION:
            shown = "none (a worker from before version 2)" if version is None else repr(version)
            raise Refusal(
                "version",
                f"the worker speaks wire version {shown}, this kernel {WIRE_VERSION}: install "
                "the same jupyterlab_torchdbg version on every host",
            )
        job, sender, seq = meta.get("job"), meta.get("sender"), meta.get("seq")
        if not isinstance(job, str) or not isinstance(sender, str) or not _HEX16.match(sender):
            raise Refusal("malformed", "the envelope names no job or sender")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise Refusal("malformed", "the envelope has no message counter")
        if not hmac.compare_digest(job.encode(), self.job.encode()):
            raise Refusal(
                "job",
                f"the worker belongs to job {job[:32]!r}, this kernel's is {self.job!r}: "
                f"export this kernel's {JOB_ENV} (ranks_env()) on that host",
            )
        last = self._last.get(sender)
        if last is not None and seq <= last:
            raise Refusal("replay", f"message {seq} of sender {sender} again (its last was {last})")
        self._last[sender] = seq
        self._last.move_to_end(sender)
        while len(self._last) > self._max:
            self._last.popitem(last=False)
        return sender
