"""The streaming core: bounded series history, pending points, and throttled flushes.

Every capability records numbers here (``log()`` scalars now; gradient norms and memory
samples reuse the same blocks). Nothing here sends one message per step: points wait in a
pending buffer until ``Stream.maybe_flush`` finds that the flush interval has passed, and
then every series goes out in one ``series`` message whose numbers travel as binary
buffers (x float64, y float32, row-major: one row of every name per x, exactly as the
rows were recorded, so a flush sends its rows without reshuffling them). The panel
learns of gaps through ``seq``.

Names travel once: every series and block has an integer ``id`` (never reused while the
extension is loaded); a ``series`` message carries a block's ``names`` only the first time
the block goes out, later ones just its ``id``. A block's names never change: new names
(e.g. a model's layers changed) make a new block with a new id, announced the same way.
Every snapshot carries every id with its names, so a panel that connects late, reloads
or resyncs learns the whole table there (R05, R06).

Blocks (``Stream.block``) record many series at once: one call per step records a whole
row (e.g. every layer's gradient norm) as one tensor, left on its device until the flush,
where all pending rows of the block are stacked and copied to the host in one go — on
CUDA without synchronising (a non-blocking copy into pinned memory, sent once its event
has completed). A block goes out as one ``Block`` with many names.

Threading: the training thread records and flushes; a comm handler on a subshell thread
may ask for a snapshot at the same time. One lock guards the store; it is held only for
list operations, never while sending. A second lock (``send_lock``) orders whole flushes
against snapshots: a comm that gets a snapshot at ``seq`` S is added to the broadcast
inside that lock, so it receives every ``series`` message from S + 1 on and nothing
older, and knows the names of every block such a message may mention without names.
"""

from __future__ import annotations

import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: History points kept per series before it is decimated by two.
HISTORY_CAPACITY = 4096
#: Pending (unsent) points per series; older ones are dropped and counted.
PENDING_CAPACITY = 200_000
#: At most this many distinct series are recorded; later names are ignored and counted.
MAX_SERIES = 2048
#: Default flush interval: at most 10 messages per second (R08).
DEFAULT_INTERVAL_S = 0.1
#: Pending (unsent) rows per block; older ones are dropped and counted. Bounded so that
#: rows left on a device cannot grow without limit (R25).
BLOCK_PENDING_ROWS = 4096

Buffers = list[memoryview]
Header = dict[str, Any]


def _le(a: array, copy: bool = True) -> memoryview:  # type: ignore[type-arg]
    """The bytes of ``a`` in little-endian order, as the protocol specifies.

    ``copy=False`` for an array made for this message only: a view, no copy (a live
    history array must be copied: it grows while the message waits to be sent).
    """
    if sys.byteorder != "little":
        a = array(a.typecode, a)
        a.byteswap()
        return memoryview(a).cast("B")
    return memoryview(a).cast("B") if not copy else memoryview(a.tobytes())


@dataclass
class Series:
    """One named series: decimated history plus points not yet sent.

    History keeps at most ``HISTORY_CAPACITY`` points: when full, every other point is
    dropped and only every ``keep_every``-th new point is kept, so a million-step run
    stays bounded while still spanning the whole run.
    """

    name: str
    #: The block id this series goes out under (see the module docstring).
    id: int = 0
    #: Whether a ``series`` message has carried the name yet.
    announced: bool = False
    hist_x: array = field(default_factory=lambda: array("d"))  # type: ignore[type-arg]
    hist_y: array = field(default_factory=lambda: array("f"))  # type: ignore[type-arg]
    keep_every: int = 1
    seen: int = 0
    pend_x: list[float] = field(default_factory=list)
    pend_y: list[Any] = field(default_factory=list)
    dropped: int = 0
    next_x: int = 0
    #: The most recent resolved value (history may have decimated it away).
    last: float | None = None

    def add_history(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        if ys:
            self.last = ys[-1]
        for x, y in zip(xs, ys, strict=True):
            if self.seen % self.keep_every == 0:
                self.hist_x.append(x)
                self.hist_y.append(y)
                if len(self.hist_x) >= HISTORY_CAPACITY:
                    self.hist_x = self.hist_x[::2]
                    self.hist_y = self.hist_y[::2]
                    self.keep_every *= 2
            self.seen += 1


Transform = Callable[[Any], Any]
RowsListener = Callable[[list[float], Any], None]


@dataclass
class _Segment:
    """Consecutive pending rows that resolve together (same transform, device, width)."""

    xs: list[float]
    host: Any  # a CPU tensor (rows x width) once the copy has completed
    event: Any  # a CUDA event for an in-flight non-blocking copy, else None
    transform: Transform | None


class BlockSeries:
    """Several series recorded together, one row per call (see the module docstring).

    ``record(values, x, transform)`` takes a 1-D tensor on any device (or a sequence of
    floats). At flush the rows are stacked, copied to the host once, passed through
    ``transform`` (host tensor ``rows x width`` -> ``rows x len(names)``; e.g. per-tensor
    norms -> per-layer norms), handed to ``on_rows`` (e.g. alarms) and sent. The result
    is kept as history as it is (no copy), so ``transform`` returns a new tensor and
    ``on_rows`` only reads it.
    Only the stream calls the flush side; ``record`` may be called from the training
    thread at any time.
    """

    def __init__(self, stream: Stream, names: tuple[str, ...], block_id: int = 0) -> None:
        self._stream = stream
        self.names = names
        self.id = block_id
        #: Whether a ``series`` message has carried the names yet.
        self.announced = False
        self.width = len(names)
        self.on_rows: RowsListener | None = None
        self.pend_x: list[float] = []
        self.pend_rows: list[Any] = []
        self.pend_tf: list[Transform | None] = []
        self.inflight: list[_Segment] = []
        self.dropped = 0
        self.hist_x = array("d")
        #: History rows, one per ``hist_x``: float32 ``rows x width`` CPU tensors, one per
        #: flush, never written after they are added (joined on snapshot and decimation).
        self._chunks: list[Any] = []
        self.keep_every = 1
        self.seen = 0
        self.last_x: float | None = None

    def record(self, values: Any, x: float, transform: Transform | None = None) -> None:
        """Queue one row. Never synchronises with a device."""
        st = self._stream
        with st._lock:
            if len(self.pend_x) >= BLOCK_PENDING_ROWS:
                del self.pend_x[0], self.pend_rows[0], self.pend_tf[0]
                self.dropped += 1
            self.pend_x.append(float(x))
            self.pend_rows.append(values)
            self.pend_tf.append(transform)
            self.last_x = float(x)
            st.has_pending = True

    # --- flush side (called by Stream.flush) -------------------------------------------

    def _take(self) -> tuple[list[float], list[Any], list[Transform | None], int]:
        taken = self.pend_x, self.pend_rows, self.pend_tf, self.dropped
        self.pend_x, self.pend_rows, self.pend_tf, self.dropped = [], [], [], 0
        return taken

    def _start(self, xs: list[float], rows: list[Any], tfs: list[Transform | None]) -> None:
        """Stack pending rows per segment and start their copies to the host."""
        import torch

        # (No ``torch.no_grad()`` block: on a cold cache entering one costs more than the
        # stack; ``_copy`` detaches the rare result that requires grad instead.)
        if all(t is tfs[0] for t in tfs) and isinstance(rows[0], torch.Tensor):
            try:
                # The common case: one stack for the whole flush.
                self._copy(xs, torch.stack(rows), tfs[0])
                return
            except (RuntimeError, TypeError):
                pass  # rows of different widths or devices: segment them
        start = 0
        for end in range(1, len(rows) + 1):
            if end < len(rows) and _same_segment(rows[start], rows[end], tfs[start], tfs[end]):
                continue
            seg_rows = rows[start:end]
            if isinstance(seg_rows[0], torch.Tensor):
                m = torch.stack([r.reshape(-1) for r in seg_rows])
            else:
                m = torch.tensor([list(r) for r in seg_rows], dtype=torch.float64)
            self._copy(xs[start:end], m, tfs[start])
            start = end

    def _copy(self, xs: list[float], m: Any, transform: Transform | None) -> None:
        import torch

        if m.requires_grad:  # rows recorded without detaching: keep no autograd graph
            m = m.detach()
        event = None
        device = m.device.type
        if device == "cuda":
            # No host sync (R26): copy into pinned memory without blocking and send the
            # rows once the copy's event has completed (at this or a later flush).
            host = torch.empty(m.shape, dtype=m.dtype, pin_memory=True)
            host.copy_(m, non_blocking=True)
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(m.device))
        elif device != "cpu":
            host = m.cpu()
        else:
            host = m
        self.inflight.append(_Segment(xs, host, event, transform))

    def _ready(self, wait: bool) -> list[tuple[list[float], Any]]:
        """Completed segments in order, transformed to ``rows x width`` float32 tensors."""
        import torch

        out: list[tuple[list[float], Any]] = []
        while self.inflight:
            seg = self.inflight[0]
            if seg.event is not None and not seg.event.query():
                if not wait:
                    break
                seg.event.synchronize()
            self.inflight.pop(0)
            m = seg.host if seg.transform is None else seg.transform(seg.host)
            # (checked first: each torch call costs more than the check on a cold cache)
            if m.dtype != torch.float32:
                m = m.to(torch.float32)
            shape = (len(seg.xs), self.width)
            if tuple(m.shape) != shape:
                m = m.reshape(shape)
            out.append((seg.xs, m))
        return out

    def _add_history(self, xs: list[float], m: Any) -> None:
        """Add the kept rows of ``m`` (one per x) to the history, decimating when full.

        Row number ``seen + i`` is kept when it is a multiple of ``keep_every``. The rows
        are kept as they are (a reference, or a strided slice's copy): a flush adds no
        per-row Python work and copies nothing while every row is kept. Chunks are
        bounded by HISTORY_CAPACITY rows in all, so this never holds more than that.
        """
        total, i = len(xs), 0
        while i < total:
            k = self.keep_every
            first = i + (-self.seen) % k
            if first >= total:
                self.seen += total - i
                break
            room = HISTORY_CAPACITY - len(self.hist_x)
            stop = min(total, first + room * k)
            if k == 1 and first == 0 and stop == total:
                self._chunks.append(m)
            else:  # only the kept rows, not a view holding all of ``m``
                self._chunks.append(m[first:stop:k].clone())
            self.hist_x.extend(xs[first:stop:k])
            self.seen += stop - i
            i = stop
            if len(self.hist_x) >= HISTORY_CAPACITY:
                # Full: keep every other row, and from now on every other new one.
                self._chunks = [self._rows()[::2].clone()]
                self.hist_x = self.hist_x[::2]
                self.keep_every *= 2

    def _rows(self) -> Any:
        """The whole history as one ``rows x width`` tensor (joins the chunks once)."""
        import torch

        if not self._chunks:
            return torch.empty((0, self.width), dtype=torch.float32)
        if len(self._chunks) > 1:
            self._chunks = [torch.cat(self._chunks)]
        return self._chunks[0]

    def history_bytes(self) -> memoryview:
        """History as float32 bytes, row-major (the wire layout of a Block's y buffer).

        Chunks are never written after they are added, so the bytes stay valid while
        the snapshot waits to be sent."""
        return _tensor_bytes(self._rows())


def _same_segment(a: Any, b: Any, ta: Any, tb: Any) -> bool:
    if ta is not tb:
        return False
    da, db = getattr(a, "device", None), getattr(b, "device", None)
    if da != db:
        return False
    if da is None:
        return len(a) == len(b)
    return bool(a.numel() == b.numel())


def _tensor_bytes(t: Any) -> memoryview:
    """Little-endian float32 bytes of a 2-D CPU float32 tensor, row-major.

    numpy (present beside torch in practice) gives a zero-copy view of a contiguous
    tensor; without it, a list round-trip.
    """
    if sys.byteorder == "little":
        try:
            a = t.numpy()
            if not a.flags.c_contiguous:
                a = a.copy()
            return memoryview(a).cast("B")
        except Exception:  # torch without numpy
            pass
    return _le(array("f", t.contiguous().reshape(-1).tolist()))


class Stream:
    """Series store + throttled broadcaster.

    ``send`` is called with ``(header, buffers)`` for each ``series`` message; it is the
    comm hub's broadcast and must not raise (the hub counts its own failures). It is
    called with ``send_lock`` held (see ``send_snapshot``).
    """

    def __init__(
        self,
        send: Callable[[Header, Buffers], None],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        resolve: Callable[[list[Any]], list[float]] | None = None,
    ) -> None:
        self._send = send
        self.interval_s = interval_s
        self._clock = clock
        self._resolve = resolve or _resolve_values
        self._lock = threading.RLock()
        #: Held for a whole flush and around ``send_snapshot`` (see the module docstring).
        self.send_lock = threading.RLock()
        self._next_id = 0
        self._series: dict[str, Series] = {}
        self._blocks: dict[tuple[str, ...], BlockSeries] = {}
        self._last_flush = clock()
        self.seq = 0
        self.messages = 0
        self.points = 0
        self.ignored_series = 0
        #: Blocks whose rows failed to resolve (their rows are dropped, never raised).
        self.block_errors = 0
        self.has_pending = False

    # --- recording -----------------------------------------------------------------

    def record(self, name: str, value: Any, x: float | None = None) -> None:
        """Append one point; ``value`` may be a float or a (device) scalar tensor."""
        with self._lock:
            s = self._series.get(name)
            if s is None:
                if len(self._series) >= MAX_SERIES:
                    self.ignored_series += 1
                    return
                s = self._series[name] = Series(name, self._new_id())
            if x is None:
                x = s.next_x
            s.next_x = int(x) + 1
            if len(s.pend_x) >= PENDING_CAPACITY:
                del s.pend_x[0], s.pend_y[0]
                s.dropped += 1
            s.pend_x.append(float(x))
            s.pend_y.append(value)
            self.has_pending = True

    def block(self, names: Sequence[str]) -> BlockSeries:
        """The block recording these series together (created on first use).

        The same names give the same block, so a recorder that is re-created (a new
        optimizer over the same model) continues its history. Raises ValueError past
        ``MAX_SERIES`` names.
        """
        key = tuple(names)
        with self._lock:
            b = self._blocks.get(key)
            if b is None:
                if not key or len(key) > MAX_SERIES:
                    raise ValueError(f"a block holds 1 to {MAX_SERIES} series, got {len(key)}")
                b = self._blocks[key] = BlockSeries(self, key, self._new_id())
            return b

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
            s = self._series.get(name)
            return None if s is None else s.last

    def clear(self, names: Iterable[str] | None = None) -> int:
        """Forget the history (and pending points) of the named series, or of all.

        A block is forgotten as a whole when any of its names is given.
        """
        with self._lock:
            wanted = None if names is None else set(names)
            keys = [k for k in self._series if wanted is None or k in wanted]
            for k in keys:
                del self._series[k]
            bkeys = [k for k in self._blocks if wanted is None or wanted.intersection(k)]
            for bk in bkeys:
                del self._blocks[bk]
            return len(keys) + sum(len(bk) for bk in bkeys)

    # --- flushing ------------------------------------------------------------------

    def due(self) -> bool:
        """Cheap check for the hot path: is there something to send and is it time?"""
        return self.has_pending and self._clock() - self._last_flush >= self.interval_s

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
            self._flush(wait)

    def _flush(self, wait: bool) -> None:
        with self._lock:
            self._last_flush = self._clock()
            if not self.has_pending:
                return
            self.has_pending = False
            taken: list[tuple[Series, list[float], list[Any], int]] = []
            for s in self._series.values():
                if s.pend_x:
                    taken.append((s, s.pend_x, s.pend_y, s.dropped))
                    s.pend_x, s.pend_y, s.dropped = [], [], 0
            blocks_taken = [(b, *b._take()) for b in self._blocks.values()]
            blocks_taken = [t for t in blocks_taken if t[1] or t[0].inflight or t[4]]
        block_out = self._resolve_blocks(blocks_taken, wait)
        if not taken and not block_out:
            return
        # Device values are resolved to floats here, once per flush (one host copy).
        flat: list[Any] = [v for _, _, ys, _ in taken for v in ys]
        floats = self._resolve(flat)
        header_blocks: list[dict[str, Any]] = []
        buffers: Buffers = []
        pos = 0
        with self._lock:
            for s, xs, ys, dropped in taken:
                vals = floats[pos : pos + len(ys)]
                pos += len(ys)
                s.add_history(xs, vals)
                block: dict[str, Any] = {"id": s.id, "count": len(xs)}
                if not s.announced:
                    block["names"] = [s.name]
                    s.announced = True
                if dropped:
                    block["dropped"] = dropped
                header_blocks.append(block)
                buffers.append(_le(array("d", xs), copy=False))
                buffers.append(_le(array("f", vals), copy=False))
            for b, bxs, m, dropped in block_out:
                b._add_history(bxs, m)
                header: dict[str, Any] = {"id": b.id, "count": len(bxs)}
                if not b.announced:
                    header["names"] = list(b.names)
                    b.announced = True
                if dropped:
                    header["dropped"] = dropped
                header_blocks.append(header)
                buffers.append(_le(array("d", bxs), copy=False))
                buffers.append(_tensor_bytes(m))  # row-major, as recorded: no reshuffle
                self.points += len(bxs) * b.width
            self.seq += 1
            seq = self.seq
            self.messages += 1
            self.points += len(flat)
        self._send({"method": "series", "seq": seq, "blocks": header_blocks}, buffers)

    def _resolve_blocks(
        self, taken: list[tuple[BlockSeries, list[float], list[Any], list[Any], int]], wait: bool
    ) -> list[tuple[BlockSeries, list[float], Any, int]]:
        """Start the host copies of newly taken rows; return what is ready to send."""
        out: list[tuple[BlockSeries, list[float], Any, int]] = []
        for b, xs, rows, tfs, dropped in taken:
            try:
                if rows:
                    b._start(xs, rows, tfs)
                ready = b._ready(wait)
                if b.inflight:
                    with self._lock:
                        self.has_pending = True  # resend attempt at the next flush
                if not ready and not dropped:
                    continue
                import torch

                bxs = [x for seg_xs, _ in ready for x in seg_xs]
                if len(ready) == 1:
                    m = ready[0][1]
                elif ready:
                    m = torch.cat([m for _, m in ready])
                else:
                    m = torch.empty((0, b.width), dtype=torch.float32)
                if b.on_rows is not None and bxs:
                    b.on_rows(bxs, m)
                out.append((b, bxs, m, dropped))
            except Exception:
                b.inflight.clear()
                with self._lock:
                    self.block_errors += 1
        return out

    def snapshot(self) -> tuple[list[dict[str, Any]], Buffers, int]:
        """History of every series as blocks + buffers, and the current ``seq``.

        Pending points are not included: they arrive in the next ``series`` message,
        whose ``seq`` is the snapshot's plus one.
        """
        with self._lock:
            blocks: list[dict[str, Any]] = []
            buffers: Buffers = []
            for s in self._series.values():
                blocks.append({"id": s.id, "names": [s.name], "count": len(s.hist_x)})
                buffers.append(_le(s.hist_x))
                buffers.append(_le(s.hist_y))
            for b in self._blocks.values():
                blocks.append({"id": b.id, "names": list(b.names), "count": len(b.hist_x)})
                buffers.append(_le(b.hist_x))
                buffers.append(b.history_bytes())
            return blocks, buffers, self.seq

    def send_snapshot(self, send: Callable[[list[dict[str, Any]], Buffers, int], None]) -> None:
        """Take a snapshot and call ``send(blocks, buffers, seq)`` with no flush in between.

        ``send`` sends the snapshot and, for a new comm, adds it to the broadcast: that
        comm then gets exactly the ``series`` messages after ``seq``, and every block id
        they mention without names is in this snapshot or announced in one of them.
        """
        with self.send_lock:
            send(*self.snapshot())


def _resolve_values(values: list[Any]) -> list[float]:
    """Turn recorded values into floats with at most one host copy per device.

    Plain numbers pass through. Tensors (already detached, one element) are grouped by
    device, stacked and copied to the host once. Anything unreadable becomes NaN.
    """
    out: list[float] = [0.0] * len(values)
    by_device: dict[Any, list[int]] = {}
    for i, v in enumerate(values):
        if isinstance(v, float):
            out[i] = v
        elif hasattr(v, "device") and hasattr(v, "reshape"):
            by_device.setdefault(v.device, []).append(i)
        else:
            out[i] = float("nan")
    if by_device:
        import torch

        for idx in by_device.values():
            try:
                stacked = torch.stack([values[i].reshape(()) for i in idx]).to(torch.float32)
                host = stacked.cpu().tolist()
            except Exception:
                host = [float("nan")] * len(idx)
            for i, h in zip(idx, host, strict=True):
                out[i] = float(h)
    return out
