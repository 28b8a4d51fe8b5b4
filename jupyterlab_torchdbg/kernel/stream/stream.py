"""``Stream``: the series store, its throttled flushes and the snapshots panels join with.

No message per step: points wait until ``Stream.maybe_flush`` finds the flush interval
passed (R08), then every series and block goes out in one ``series`` message (``wire``).

Threading: the training thread records and flushes; a comm handler on a subshell thread
may ask for a snapshot at the same time. One lock (``_lock``) guards the store; it is
held only for list operations, never while sending. A block guards its own pending rows
and tells the stream through ``mark_pending`` that it has some. A second lock
(``send_lock``) orders whole flushes against snapshots: a comm that gets a snapshot at
``seq`` S is added to the broadcast inside that lock, so it receives every ``series``
message from S + 1 on and nothing older, and knows the names of every block such a
message may mention without names (R05, R06).

Bounds (R44, all in ``limits``): each name is made wire-safe and at most 512 characters
once, when its series or block is created (``names.bound_name``: the store is keyed by
that form); at most ``MAX_SERIES`` scalar series (later names ignored and counted) and
``MAX_BLOCK_NAMES`` names in all blocks (least recently active blocks forgotten).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from . import budget, limits, reads
from .host_copy import resolve_values
from .names import bound_name
from .retired import Retired, with_run
from .series import BlockSeries, PendingRows, Series
from .wire import Buffers, scalar_bytes, series_header, snapshot_blocks, tensor_bytes, x_bytes

if TYPE_CHECKING:
    import torch

    from ...protocol import messages as m
    from .packed import PackedRows


class Stream:
    """Series store + throttled broadcaster.

    ``send`` is called with ``(header, buffers)`` for each ``series`` message; it is the
    comm hub's broadcast and must not raise (the hub counts its own failures). It is
    called with ``send_lock`` held (see ``send_snapshot``).
    """

    def __init__(
        self,
        send: Callable[[Mapping[str, object], Buffers], None],
        *,
        interval_s: float = limits.DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        resolve: Callable[[list[object]], list[float]] | None = None,
    ) -> None:
        self._send = send
        self.interval_s = interval_s
        #: Flush this many times less often than ``interval_s`` (>= 1): the gradient
        #: monitor raises it when its periodic work costs more than its budget.
        self.slowdown = 1.0
        #: The same, from the stream's own sending budget (``limits.SEND_BUDGET``): the
        #: running mean of a sending flush's cost (on ``clock``) over the budget's share
        #: of the interval. The larger of the two applies (``flush_interval_s``).
        self.send_slowdown = 1.0
        self.flush_cost_s: float | None = None
        self._clock = clock
        self._resolve = resolve or resolve_values
        self._lock = threading.RLock()
        #: Held for a whole flush and around ``send_snapshot`` (see the module docstring).
        self.send_lock = threading.RLock()
        self._next_id = 0
        self._series: dict[str, Series] = {}
        #: Names given to ``record`` that are not their own bounded form -> that form
        #: (at most MAX_SERIES entries; saves re-bounding a long name on every call).
        self._aliases: dict[str, str] = {}
        self._blocks: dict[tuple[str, ...], BlockSeries] = {}
        self._block_names = 0
        #: Changes whenever a block leaves the table (a recorder may keep its block while
        #: this stays the same: log_rows.py).
        self.blocks_gen = 0
        self._last_flush = clock()
        self.seq = 0
        self.messages = 0
        self.points = 0
        #: Series names ignored past MAX_SERIES plus block names forgotten past
        #: MAX_BLOCK_NAMES (a snapshot then says ``truncated``).
        self.ignored_series = 0
        #: Blocks whose rows failed to resolve (their rows are dropped, never raised).
        self.block_errors = 0
        self.has_pending = False
        #: The run of new log() series and per-run blocks (runs.py), whether it is current,
        #: and earlier runs' series and blocks (forgotten after ``limits.KEEP_RUNS``).
        self.run: int | None = None
        self.running = False
        self.retired = Retired()
        #: Called (no lock held) by log() while no run is current / when a logged step
        #: goes backwards; each may start a run. ``logged``: log() points so far (runs.py:
        #: a loop that only logs is active).
        self.on_no_run: Callable[[], None] | None = None
        self.on_step_back: Callable[[], None] | None = None
        self.logged = 0

    # --- recording -----------------------------------------------------------------

    def record(
        self, name: str, value: object, x: float | None = None, per_run: bool = True
    ) -> bool:
        """Append one point; ``value`` may be a float or a (device) scalar tensor.

        ``name`` is kept as ``bound_name(name)``. Returns False when the point was
        ignored because MAX_SERIES other series exist already. ``per_run`` (log()): the
        series belongs to the run (runs.py); not (memory's): it plays no part in runs.
        """
        if per_run and not self.running and self.on_no_run is not None:
            self.on_no_run()
        for retry in (False, True):
            with self._lock:
                s = self._series.get(name) or self._series_for(name, per_run)
                if s is None:
                    self.ignored_series += 1
                    return False
                if retry or self.on_step_back is None or not s.per_run or not s.goes_back(x):
                    s.record(value, x)
                    self.has_pending = True
                    if s.per_run:
                        self.logged += 1
                    return True
            self.on_step_back()  # a new run: ``start_run`` retires this series
        return False

    def _series_for(self, name: str, per_run: bool = True) -> Series | None:
        """The series of a name not found as given (under ``_lock``): found or created
        under its bounded form, or None past MAX_SERIES."""
        key = self._aliases.get(name)
        if key is None:
            key = bound_name(name)
            if key != name and len(self._aliases) < limits.MAX_SERIES:
                self._aliases[name] = key
        s = self._series.get(key)
        if s is None and len(self._series) < limits.MAX_SERIES:
            run = self.run if per_run else None
            s = self._series[key] = Series(key, self._new_id(), run=run, per_run=per_run)
        return s

    def start_run(self, run: int) -> None:
        """A run starts (runs.py): the earlier run's log() series and per-run blocks are
        retired (kept, flushed, in snapshots with their ``run``); new points get new ids."""
        with self._lock:
            self.retired.retire(run, [s for s in self._series.values() if s.per_run])
            self._series = {k: s for k, s in self._series.items() if not s.per_run}
            for key, b in list(self._blocks.items()):
                if b.per_run:
                    del self._blocks[key]
                    self._block_names -= b.width
                    self.retired.retire(run, [b])
            self.retired.prune(run)
            self.blocks_gen += 1
            self.run = run
            self.running = True

    def end_run(self) -> None:
        """The run ended: the next log() may start one (``on_no_run``)."""
        self.running = False

    def block(self, names: Sequence[str], per_run: bool = False) -> BlockSeries:
        """The block recording these series together (created on first use).

        ``per_run``: the block belongs to the current run (a gradient track): a new run
        retires it, and the same names then get a new block.

        The same names give the same block, so a recorder that is re-created (a new
        optimizer over the same model) continues its history. Names are kept as
        ``bound_name`` makes them. Raises ValueError for no names or more than
        ``MAX_SERIES``. A new block that would take the blocks past ``MAX_BLOCK_NAMES``
        names makes room by forgetting the least recently active blocks.
        """
        raw = tuple(names)
        with self._lock:
            b = self._blocks.get(raw)
            if b is not None:
                return b
            key = tuple(bound_name(n) for n in raw)
            b = self._blocks.get(key)
            if b is None:
                if not key or len(key) > limits.MAX_SERIES:
                    raise ValueError(
                        f"a block holds 1 to {limits.MAX_SERIES} series, got {len(key)}"
                    )
                self._make_room(len(key))
                b = BlockSeries(key, self._new_id(), on_record=self.mark_pending)
                if per_run:
                    b.per_run, b.run = True, self.run
                self._blocks[key] = b
                self._block_names += len(key)
            return b

    def _make_room(self, width: int) -> None:
        """Forget the least recently active blocks until ``width`` more names fit in
        MAX_BLOCK_NAMES (under ``_lock``). A recorder still holding a forgotten block
        records into it harmlessly (its pending rows stay bounded) but nothing is sent."""
        if self._block_names + width <= limits.MAX_BLOCK_NAMES:
            return
        self.blocks_gen += 1
        for b in sorted(self._blocks.values(), key=lambda b: (b.active_seq, b.id)):
            del self._blocks[b.names]
            self._block_names -= b.width
            self.ignored_series += b.width
            if self._block_names + width <= limits.MAX_BLOCK_NAMES:
                return

    def mark_pending(self) -> None:
        """Note that some block has rows to send (called by ``BlockSeries.record``).

        A plain store: a flush clears the flag before it takes the blocks' rows, so a row
        recorded meanwhile is either taken or leaves the flag set."""
        self.has_pending = True

    def _new_id(self) -> int:
        """The next block id (under ``_lock``); ids are never reused, so a panel's
        name table can only be stale by missing an id, never by a wrong entry."""
        self._next_id += 1
        return self._next_id

    def names(self) -> list[str]:
        with self._lock:
            return list(self._series) + [n for b in self._blocks.values() for n in b.names]

    def last(self, name: str) -> float | None:
        """The most recent flushed value of a (scalar) series, or None."""
        with self._lock:
            s = self._series.get(name) or self._series.get(bound_name(name))
            return None if s is None else s.last

    def tails(
        self, wanted: Callable[[str], bool], after: dict[str, float]
    ) -> list[tuple[str, list[float], list[float], bool]]:
        """Flushed points of the scalar series ``wanted`` picks, newer than
        ``after[name]`` (see ``reads.tails``)."""
        with self._lock:
            return reads.tails(self._series, wanted, after)

    def newest(self, wanted: Callable[[str], bool]) -> list[object]:
        """The newest value of each scalar series ``wanted`` picks (see ``reads.newest``)."""
        with self._lock:
            return reads.newest(self._series, wanted)

    def clear(self, names: Iterable[str] | None = None, earlier_runs: bool = True) -> int:
        """Forget the history (and pending points) of the named series, or of all.

        A block is forgotten as a whole when any of its names is given. A name is
        matched in its bounded form (a name the panel was sent is its own bounded form).
        ``earlier_runs=False``: the current run's only (a track that was none: a hand-over).
        """
        with self._lock:
            wanted = None if names is None else {bound_name(n) for n in names if isinstance(n, str)}
            keys = [k for k in self._series if wanted is None or k in wanted]
            for k in keys:
                del self._series[k]
            gone = self.retired.clear(wanted) if earlier_runs else 0
            if wanted is None:
                self._aliases.clear()
            bkeys = [k for k in self._blocks if wanted is None or wanted.intersection(k)]
            self.blocks_gen += 1
            for bk in bkeys:
                del self._blocks[bk]
                self._block_names -= len(bk)
            return len(keys) + sum(len(bk) for bk in bkeys) + gone

    # --- flushing ------------------------------------------------------------------

    @property
    def flush_interval_s(self) -> float:
        """The time between two flushes now (R08: never under ``interval_s``)."""
        return self.interval_s * max(self.slowdown, self.send_slowdown)

    def due(self) -> bool:
        """Cheap check for the hot path: is there something to send and is it time?"""
        a, b = self.slowdown, self.send_slowdown  # (no max(): a call on the hot path)
        wait = self.interval_s * (a if a > b else b)
        return self.has_pending and self._clock() - self._last_flush >= wait

    def maybe_flush(self) -> bool:
        if self.due():
            self.flush()
            return True
        return False

    def flush(self, wait: bool = False) -> None:
        """Move pending points into history and broadcast them as one message.

        Block rows whose device copy has not completed yet stay pending for the next
        flush, unless ``wait`` (the end of a cell) asks to wait for them.
        """
        with self.send_lock:
            t0 = self._clock()
            if self._flush(wait):  # a message went out: the sending budget (budget.py)
                self.flush_cost_s = cost = budget.mean_cost(self.flush_cost_s, self._clock() - t0)
                self.send_slowdown = budget.slowdown(cost, self.interval_s)

    def _flush(self, wait: bool) -> bool:
        """One flush (under ``send_lock``); True when a message went out."""
        with self._lock:
            self._last_flush = self._clock()
            if not self.has_pending:
                return False
            self.has_pending = False
            taken: list[tuple[Series, list[float], list[object], int]] = [
                (s, *s.take()) for s in self.retired.series(self._series.values()) if s.pend_x
            ]
            # (only blocks with news: has_pending was cleared first, so a row recorded
            # meanwhile is taken now or sets it again for the next flush)
            blocks_taken = [
                (b, b.take_pending())
                for b in self.retired.blocks(self._blocks.values())
                if b.has_news
            ]
            for b, p in blocks_taken:
                if p.xs:
                    b.active_seq = self.seq + 1  # recorded into lately: forgotten last
        block_out = self._collect_blocks(blocks_taken, wait)
        if not taken and not block_out:
            return False
        # Device values are resolved to floats here, once per flush (one host copy).
        flat: list[object] = [v for _, _, ys, _ in taken for v in ys]
        floats = self._resolve(flat) if flat else []
        header_blocks: list[m.Block] = []
        buffers: Buffers = []
        pos = 0
        with self._lock:
            for s, xs, ys, dropped in taken:
                vals = floats[pos : pos + len(ys)]
                pos += len(ys)
                s.add_history(xs, vals)
                names = None if s.announced else [s.name]
                s.announced = True
                header_blocks.append(with_run(series_header(s.id, len(xs), names, dropped), s))
                buffers.append(x_bytes(xs))
                buffers.append(scalar_bytes(vals))
            for b, bxs, m, dropped in block_out:
                b.history.add(bxs, m)
                names = None if b.announced else list(b.names)
                b.announced = True
                header_blocks.append(with_run(series_header(b.id, len(bxs), names, dropped), b))
                buffers.append(x_bytes(bxs))
                buffers.append(tensor_bytes(m))  # row-major, as recorded: no reshuffle
                self.points += len(bxs) * b.width
            self.seq += 1
            seq = self.seq
            self.messages += 1
            self.points += len(flat)
        self._send({"method": "series", "seq": seq, "blocks": header_blocks}, buffers)
        return True

    def _collect_blocks(
        self, taken: list[tuple[BlockSeries, PendingRows]], wait: bool
    ) -> list[tuple[BlockSeries, list[float], torch.Tensor | PackedRows, int]]:
        """Start the host copies of newly taken rows; return what is ready to send."""
        out: list[tuple[BlockSeries, list[float], torch.Tensor | PackedRows, int]] = []
        for b, pending in taken:
            try:
                ready = b.collect(pending, wait)
            except Exception:
                with self._lock:
                    self.block_errors += 1
                continue
            if b.copies_in_flight:
                self.mark_pending()  # resend attempt at the next flush
            if ready is not None:
                out.append((b, *ready, pending.dropped))
        return out

    def snapshot(self) -> tuple[list[m.SnapshotBlock], Buffers, int]:
        """History of every series as blocks + buffers, and the current ``seq``.

        Pending points are not included: they arrive in the next ``series`` message,
        whose ``seq`` is the snapshot's plus one.
        """
        with self._lock:
            blocks, buffers = snapshot_blocks(
                self.retired.series(self._series.values()),
                self.retired.blocks(self._blocks.values()),
            )
            return blocks, buffers, self.seq

    def send_snapshot(self, send: Callable[[list[m.SnapshotBlock], Buffers, int], None]) -> None:
        """Take a snapshot and call ``send(blocks, buffers, seq)`` with no flush in between.

        ``send`` sends the snapshot and, for a new comm, adds it to the broadcast: that
        comm then gets exactly the ``series`` messages after ``seq``, and every block id
        they mention without names is in this snapshot or announced in one of them.
        """
        with self.send_lock:
            send(*self.snapshot())
