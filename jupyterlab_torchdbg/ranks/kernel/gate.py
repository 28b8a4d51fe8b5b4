"""What the ranks endpoint lets in, and what it costs to say no (R55).

Three doors, each cheap for the kernel:

- **the connection**: the ROUTER is a zmq PLAIN server; libzmq asks this module's ZAP
  handler (``answer_zap``, an inproc REP the endpoint's thread polls) about each new
  connection, and only the key's ``connect_token`` is admitted. A process without the
  key never gets a frame queued in the kernel; its attempts are counted (``key`` for a
  wrong token, ``handshake`` for no credentials or not speaking zmq at all, from the
  socket's monitor: ``count_handshakes``);
- **the message**: read one frame at a time and dropped over the frame/byte limits
  (wire.read_frames);
- **the signature**: a peer that has sent no verified message yet (or whose last one
  was refused) pays a token from one bucket for the endpoint (``Gate.admit``) before
  any HMAC; with the bucket empty its messages are dropped unread (``throttled``).
  Proven peers (a signed worker) never wait on the bucket.
"""

from __future__ import annotations

import hmac
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import zmq

#: Unproven messages verified per second, and the burst, in tokens (1 + 1 per MB).
VERIFY_RATE = 200.0
VERIFY_BURST = 400.0
#: Peers remembered as proven (then forgotten all at once: they prove themselves again).
MAX_PROVEN = 4096
#: ZAP requests / monitor events handled per poll (the rest wait for the next one).
BATCH = 256


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` kept."""

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()

    def take(self, cost: float = 1.0) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < cost:
            return False
        self._tokens -= cost
        return True


class Gate:
    """The endpoint's admission state: counts of refusals by reason, proven peers."""

    def __init__(self, token: bytes, clock: Callable[[], float] = time.monotonic) -> None:
        self._token = token
        self.refusals: Counter[str] = Counter()
        self._proven: set[bytes] = set()
        self._bucket = TokenBucket(VERIFY_RATE, VERIFY_BURST, clock)

    @property
    def refused(self) -> int:
        return sum(self.refusals.values())

    def refuse(self, reason: str, peer: bytes | None = None) -> None:
        self.refusals[reason] += 1
        if peer is not None:
            self._proven.discard(peer)

    def admit(self, peer: bytes, nbytes: int) -> bool:
        """May this message be verified now? Proven peers always; others by the bucket."""
        if peer in self._proven:
            return True
        return self._bucket.take(1.0 + nbytes / (1 << 20))

    def proved(self, peer: bytes) -> None:
        if len(self._proven) >= MAX_PROVEN:
            self._proven.clear()
        self._proven.add(peer)

    def answer_zap(self, zap: zmq.Socket[bytes]) -> None:
        """Answer the waiting ZAP requests: 200 for the key's token, 400 otherwise."""
        import zmq

        for _ in range(BATCH):
            try:
                req = zap.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            ok = (
                len(req) >= 8
                and req[0] == b"1.0"
                and req[5] == b"PLAIN"
                and hmac.compare_digest(req[7], self._token)
            )
            if not ok:
                self.refuse("key")
            request_id = req[1] if len(req) > 1 else b""
            status = [b"200", b"OK", b"torchdbg"] if ok else [b"400", b"wrong key", b""]
            zap.send_multipart([b"1.0", request_id, *status, b""])

    def count_handshakes(self, monitor: zmq.Socket[bytes]) -> None:
        """Count failed handshakes the socket's monitor reports (no key at all)."""
        import zmq

        for _ in range(BATCH):
            try:
                monitor.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            self.refuse("handshake")
