"""What the stream records per name: a scalar ``Series`` or a ``BlockSeries`` of many.

Both keep points not yet sent (bounded; older ones are dropped and counted), a bounded
``History`` (see ``history``) and whether a ``series`` message has carried their names
yet (names travel once per block id, R05). The ``Stream`` owns them: it creates them,
takes their pending points at each flush and adds the flushed rows to their history
under its store lock.

A ``BlockSeries`` records many series at once: one ``record`` call per step records a
whole row (e.g. every layer's gradient norm) as one tensor, left on its device until the
flush, where the block's pending rows are copied to the host in one go (``host_copy``).
``record`` may be called from the training thread at any time; it guards its pending
rows with its own lock and tells the stream through ``on_record`` that it has some.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from struct import Struct
from typing import TYPE_CHECKING

from . import limits
from .history import BlockHistory, ScalarHistory
from .host_copy import HostCopies, Row, Transform
from .packed import ITEM, PackedRows

if TYPE_CHECKING:
    import torch

#: Sees a flush's ready rows: x and a ``rows x width`` float32 CPU tensor.
RowsListener = Callable[[list[float], "torch.Tensor"], None]


@dataclass
class Series:
    """One named series (a ``log()`` scalar): its history plus points not yet sent."""

    name: str
    #: The block id this series goes out under (see the package docstring).
    id: int = 0
    #: Whether a ``series`` message has carried the name yet.
    announced: bool = False
    history: ScalarHistory = field(default_factory=ScalarHistory)
    pend_x: list[float] = field(default_factory=list)
    pend_y: list[object] = field(default_factory=list)
    dropped: int = 0
    #: log() without a step counts calls from 1 in each run (each run has its own Series).
    next_x: int = 1
    #: The most recent resolved value (history may have decimated it away).
    last: float | None = None
    #: The run the points belong to (None: recorded outside any run).
    run: int | None = None
    #: A log() series (a new run retires it); memory's are not.
    per_run: bool = True
    #: The last step given explicitly (``log(step, ...)``), to see it go backwards.
    last_step: float | None = None

    def goes_back(self, x: float | None) -> bool:
        """``x`` is a step given explicitly and lower than the last one given: the
        logged step went backwards (a new run, runs.py)."""
        return x is not None and self.last_step is not None and x < self.last_step

    def record(self, value: object, x: float | None) -> None:
        """Queue one point; x defaults to one past the previous one (the stream's lock
        is held)."""
        if x is None:
            x = self.next_x
        else:
            self.last_step = x
        self.next_x = int(x) + 1
        if len(self.pend_x) >= limits.PENDING_CAPACITY:
            del self.pend_x[0], self.pend_y[0]
            self.dropped += 1
        self.pend_x.append(float(x))
        self.pend_y.append(value)

    def take(self) -> tuple[list[float], list[object], int]:
        """The pending points (x, raw values, dropped count), leaving none pending."""
        taken = self.pend_x, self.pend_y, self.dropped
        self.pend_x, self.pend_y, self.dropped = [], [], 0
        return taken

    def add_history(self, xs: list[float], ys: list[float]) -> None:
        """Keep flushed, resolved points."""
        if ys:
            self.last = ys[-1]
        self.history.add(xs, ys)


@dataclass
class PendingRows:
    """A block's rows not sent yet: x, raw rows, their transforms, and rows dropped.

    ``packed``: ``log()``'s rows (``record_packed``), native float32 one after the other
    in the first ``used`` bytes, while no other kind of row is pending (``rows`` is then
    empty); packed in place, never written once a flush has taken it (it becomes the
    message's buffer and the history's chunk).
    """

    xs: list[float] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    transforms: list[Transform | None] = field(default_factory=list)
    dropped: int = 0
    packed: bytearray | None = None
    used: int = 0

    def packed_bytes(self) -> bytearray | None:
        """The packed rows, trimmed to what was written (no copy)."""
        data = self.packed
        if data is not None:
            del data[self.used :]
        return data

    def unpack(self, width: int) -> None:
        """Move the packed rows into ``rows`` (one ``bytes`` each), before a row of
        another kind is queued after them."""
        data = self.packed_bytes()
        if data is not None:
            size = width * ITEM
            self.rows = [bytes(data[i : i + size]) for i in range(0, len(data), size)]
            self.transforms = [None] * len(self.rows)
            self.packed = None


class BlockSeries:
    """Several series recorded together, one row per call (see the module docstring).

    ``record(values, x, transform)`` takes a 1-D tensor on any device (or a sequence of
    floats). At flush the rows are stacked, copied to the host once, passed through
    ``transform`` (host tensor ``rows x width`` -> ``rows x len(names)``; e.g. per-tensor
    norms -> per-layer norms), handed to ``on_rows`` (e.g. alarms) and sent. The result
    is kept as history as it is (no copy), so ``transform`` returns a new tensor and
    ``on_rows`` only reads it.
    Only the stream calls the flush side (``take_pending``, ``collect``); ``record`` may
    be called from the training thread at any time.
    """

    def __init__(
        self,
        names: tuple[str, ...],
        block_id: int = 0,
        on_record: Callable[[], None] = lambda: None,
    ) -> None:
        self.names = names
        self.id = block_id
        #: A gradient track's block belongs to a run (``run``); memory's to none.
        self.per_run = False
        self.run: int | None = None
        #: Whether a ``series`` message has carried the names yet.
        self.announced = False
        #: The ``seq`` of the last flush that took rows of this block (0: none yet); the
        #: stream forgets the blocks with the lowest first when it needs room (R44).
        self.active_seq = 0
        self.width = len(names)
        self.on_rows: RowsListener | None = None
        self.history = BlockHistory(self.width)
        self.last_x: float | None = None
        self._on_record = on_record
        self._lock = threading.Lock()
        self._pending = PendingRows()
        self._copies = HostCopies(self.width)
        #: Rows a pending buffer of packed rows starts with room for (``record_packed``).
        self._expect_rows = 8

    def record_packed(self, pack: Struct, values: tuple[object, ...], x: float) -> None:
        """Queue one row: ``values`` packed by ``pack`` (``width`` native float32s,
        ``log_rows``) straight into the pending buffer, sent as it is at the flush (no
        torch, ``PackedRows``). Raises what ``pack`` raises (nothing is queued then).

        Unlike ``record`` it does not tell the stream: the caller sets the stream's
        ``has_pending`` right after (a flush in between takes the row or leaves the flag
        to be set; either way the row goes out at this flush or the next)."""
        with self._lock:
            p = self._pending
            if p.rows:  # rows of another kind pending: queued among them, in order
                self._queue(p, pack.pack(*values), x, None)
                return
            size = pack.size
            buf = p.packed
            if buf is None:  # room for as many rows as the last flush took, and more
                buf = p.packed = bytearray(size * self._expect_rows)
            else:
                if len(p.xs) >= limits.BLOCK_PENDING_ROWS:  # the oldest row goes (R25)
                    del p.xs[0], buf[:size]
                    p.used -= size
                    p.dropped += 1
                if p.used + size > len(buf):
                    buf.extend(bytes(max(size, len(buf))))
            pack.pack_into(buf, p.used, *values)
            p.used += size
            p.xs.append(x)
            self.last_x = x

    def record(self, values: Row, x: float, transform: Transform | None = None) -> None:
        """Queue one row. Never synchronises with a device."""
        with self._lock:
            p = self._pending
            p.unpack(self.width)
            self._queue(p, values, x, transform)

    def _queue(self, p: PendingRows, values: Row, x: float, transform: Transform | None) -> None:
        """Queue one row in ``rows`` (under ``_lock``)."""
        if len(p.xs) >= limits.BLOCK_PENDING_ROWS:
            del p.xs[0], p.rows[0], p.transforms[0]
            p.dropped += 1
        p.xs.append(float(x))
        p.rows.append(values)
        p.transforms.append(transform)
        self.last_x = float(x)
        # Inside the lock: a flush that takes these rows has cleared the flag first.
        self._on_record()

    # --- flush side (called by Stream.flush) -------------------------------------------

    @property
    def has_news(self) -> bool:
        """Rows pending, dropped or still being copied: a flush has something to take
        (read without the lock: a row recorded meanwhile sets the stream's flag again)."""
        p = self._pending
        return bool(p.xs or p.dropped or self._copies)

    @property
    def copies_in_flight(self) -> bool:
        """Whether some rows are still being copied to the host (sent at a later flush)."""
        return bool(self._copies)

    def take_pending(self) -> PendingRows:
        """The rows recorded since the last flush, leaving none pending."""
        with self._lock:
            taken, self._pending = self._pending, PendingRows()
            return taken

    def collect(
        self, pending: PendingRows, wait: bool
    ) -> tuple[list[float], torch.Tensor | PackedRows] | None:
        """Start the host copies of ``pending``; return the rows ready to send (x and a
        ``rows x width`` float32 tensor), or None when none is ready and none dropped.

        Rows whose device copy has not completed stay in flight for a later flush unless
        ``wait``. ``on_rows`` sees every ready row once. On an exception the rows in
        flight are forgotten (the stream counts the failure).
        """
        try:
            return self._collect(pending, wait)
        except Exception:
            self._copies.clear()
            raise

    def _collect(
        self, pending: PendingRows, wait: bool
    ) -> tuple[list[float], torch.Tensor | PackedRows] | None:
        if pending.packed is not None:
            self._expect_rows = max(8, len(pending.xs) + len(pending.xs) // 2)
            if not self._copies:  # log()'s packed rows: sent as they are, no torch
                packed = PackedRows(pending.packed_bytes() or b"", self.width)
                if self.on_rows is not None:
                    self.on_rows(pending.xs, packed.tensor())
                return pending.xs, packed
            pending.unpack(self.width)  # after rows still in flight, in order
        if pending.rows:
            self._copies.start(pending.xs, pending.rows, pending.transforms)
        ready = self._copies.ready(wait)
        if not ready and not pending.dropped:
            return None
        import torch

        xs = [x for seg_xs, _ in ready for x in seg_xs]
        if len(ready) == 1:
            m = ready[0][1]
        elif ready:
            m = torch.cat([m for _, m in ready])
        else:
            m = torch.empty((0, self.width), dtype=torch.float32)
        if self.on_rows is not None and xs:
            self.on_rows(xs, m)
        return xs, m
