"""The streaming core: bounded series history, pending points, and throttled flushes.

Every capability records numbers here (``log()`` scalars now; gradient norms and memory
samples reuse the same blocks). Nothing here sends one message per step: points wait in a
pending buffer until ``Stream.maybe_flush`` finds that the flush interval has passed, and
then every series goes out in one ``series`` message whose numbers travel as binary
buffers (x float64, y float32). The panel learns of gaps through ``seq``.

Blocks (``Stream.block``) record many series at once: one call per step records a whole
row (e.g. every layer's gradient norm) as one tensor, left on its device until the flush,
where all pending rows of the block are stacked and copied to the host in one go — on
CUDA without synchronising (a non-blocking copy into pinned memory, sent once its event
has completed). A block goes out as one ``Block`` with many names.

Threading: the training thread records and flushes; a comm handler on a subshell thread
may ask for a snapshot at the same time. One lock guards the store; it is held only for
list operations, never while sending.
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


def _le(a: array) -> memoryview:  # type: ignore[type-arg]
    """The bytes of ``a`` in little-endian order, as the protocol specifies."""
    if sys.byteorder != "little":
        a = array(a.typecode, a)
        a.byteswap()
    return memoryview(a.tobytes())


@dataclass
class Series:
    """One named series: decimated history plus points not yet sent.

    History keeps at most ``HISTORY_CAPACITY`` points: when full, every other point is
    dropped and only every ``keep_every``-th new point is kept, so a million-step run
    stays bounded while still spanning the whole run.
    """

    name: str
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
    norms -> per-layer norms), handed to ``on_rows`` (e.g. alarms) and sent.
    Only the stream calls the flush side; ``record`` may be called from the training
    thread at any time.
    """

    def __init__(self, stream: Stream, names: tuple[str, ...]) -> None:
        self._stream = stream
        self.names = names
        self.width = len(names)
        self.on_rows: RowsListener | None = None
        self.pend_x: list[float] = []
        self.pend_rows: list[Any] = []
        self.pend_tf: list[Transform | None] = []
        self.inflight: list[_Segment] = []
        self.dropped = 0
        self.hist_x = array("d")
        self.hist_y = array("f")  # row-major, ``width`` values per row
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

        with torch.no_grad():
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

        event = None
        if m.device.type == "cuda":
            # No host sync (R26): copy into pinned memory without blocking and send the
            # rows once the copy's event has completed (at this or a later flush).
            host = torch.empty(m.shape, dtype=m.dtype, pin_memory=True)
            host.copy_(m, non_blocking=True)
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(m.device))
        elif m.device.type != "cpu":
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
            m = seg.host.to(torch.float32) if seg.transform is None else seg.transform(seg.host)
            m = m.to(torch.float32).reshape(len(seg.xs), self.width)
            out.append((seg.xs, m))
        return out

    def _add_history(self, xs: list[float], m: Any) -> None:
        if self.keep_every == 1:
            keep = None
        else:
            keep = [i for i in range(len(xs)) if (self.seen + i) % self.keep_every == 0]
        self.seen += len(xs)
        if keep is None:
            self.hist_x.extend(xs)
            self.hist_y.frombytes(_tensor_bytes(m))  # row-major
        elif keep:
            self.hist_x.extend(xs[i] for i in keep)
            self.hist_y.frombytes(_tensor_bytes(m[keep]))
        while len(self.hist_x) >= HISTORY_CAPACITY:
            import torch

            rows = len(self.hist_x)
            every_other = torch.frombuffer(self.hist_y, dtype=torch.float32)
            every_other = every_other.view(rows, self.width)[::2].contiguous()
            halved = array("f")
            halved.frombytes(_tensor_bytes(every_other))
            self.hist_y = halved
            self.hist_x = self.hist_x[::2]
            self.keep_every *= 2

    def history_series_major(self) -> array:  # type: ignore[type-arg]
        """History as float32, series-major (the wire layout of a Block's y buffer)."""
        w = self.width
        if w == 1:
            return array("f", self.hist_y)
        out = array("f")
        for j in range(w):
            out.extend(self.hist_y[j::w])
        return out


def _same_segment(a: Any, b: Any, ta: Any, tb: Any) -> bool:
    if ta is not tb:
        return False
    da, db = getattr(a, "device", None), getattr(b, "device", None)
    if da != db:
        return False
    if da is None:
        return len(a) == len(b)
    return bool(a.numel() == b.numel())


def _tensor_bytes(t: Any, transpose: bool = False) -> memoryview:
    """Little-endian float32 bytes of a 2-D CPU float32 tensor (of ``t.T`` if asked).

    numpy (present beside torch in practice) gives a zero-copy view and the fastest
    transpose; without it, a list round-trip.
    """
    if sys.byteorder == "little":
        try:
            a = t.numpy()
            if transpose:
                import numpy as np

                a = np.ascontiguousarray(a.T)
            elif not a.flags.c_contiguous:
                a = a.copy()
            return memoryview(a).cast("B")
        except Exception:  # torch without numpy
            pass
    t = t.t() if transpose else t
    return _le(array("f", t.contiguous().reshape(-1).tolist()))


class Stream:
    """Series store + throttled broadcaster.

    ``send`` is called with ``(header, buffers)`` for each ``series`` message; it is the
    comm hub's broadcast and must not raise (the hub counts its own failures).
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
                s = self._series[name] = Series(name)
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
                b = self._blocks[key] = BlockSeries(self, key)
            return b

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
                block: dict[str, Any] = {"names": [s.name], "count": len(xs)}
                if dropped:
                    block["dropped"] = dropped
                header_blocks.append(block)
                buffers.append(_le(array("d", xs)))
                buffers.append(_le(array("f", vals)))
            for b, bxs, m, dropped in block_out:
                b._add_history(bxs, m)
                header: dict[str, Any] = {"names": list(b.names), "count": len(bxs)}
                if dropped:
                    header["dropped"] = dropped
                header_blocks.append(header)
                buffers.append(_le(array("d", bxs)))
                buffers.append(_tensor_bytes(m, transpose=True))  # series-major on the wire
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
                blocks.append({"names": [s.name], "count": len(s.hist_x)})
                buffers.append(_le(s.hist_x))
                buffers.append(_le(s.hist_y))
            for b in self._blocks.values():
                blocks.append({"names": list(b.names), "count": len(b.hist_x)})
                buffers.append(_le(b.hist_x))
                buffers.append(_le(b.history_series_major()))
            return blocks, buffers, self.seq


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
