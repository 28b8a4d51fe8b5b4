"""Getting recorded device values to the host: one copy per flush, never a device sync.

- ``resolve_values``: a flush's scalar points (floats or one-element tensors) become
  floats with at most one host copy per device.
- ``HostCopies``: a block's pending rows are stacked per segment and copied to the host
  in one go — on CUDA without synchronising (a non-blocking copy into pinned memory,
  handed on once its event has completed, at this or a later flush; R26).

Both run on the flushing thread only; torch is imported when there is a tensor to copy.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union, cast

if TYPE_CHECKING:
    import torch

#: A block's transform: host tensor ``rows x width_in`` -> ``rows x width``.
Transform = Callable[["torch.Tensor"], "torch.Tensor"]
#: One pending row: a 1-D tensor on any device, ``log()``'s native float32 bytes, or floats.
Row = Union["torch.Tensor", bytes, Sequence[float]]


def resolve_values(values: list[object]) -> list[float]:
    """Turn recorded values into floats with at most one host copy per device.

    Plain numbers pass through. Tensors (already detached, one element) are grouped by
    device, stacked and copied to the host once. Should a group not stack (dtypes torch
    cannot promote together, such as float8 beside float32), its values are read one by
    one instead, so one odd value never costs the others theirs (R42). Anything
    unreadable becomes NaN.
    """
    out: list[float] = [0.0] * len(values)
    by_device: dict[object, list[int]] = {}
    tensors: dict[int, torch.Tensor] = {}
    for i, v in enumerate(values):
        if isinstance(v, float):
            out[i] = v
        elif hasattr(v, "device") and hasattr(v, "reshape"):
            # duck-typed, so that no torch import is needed when every value is a float
            tensors[i] = cast("torch.Tensor", v)
            by_device.setdefault(tensors[i].device, []).append(i)
        else:
            out[i] = float("nan")
    if by_device:
        import torch

        for idx in by_device.values():
            try:
                stacked = torch.stack([tensors[i].reshape(()) for i in idx]).to(torch.float32)
                host = stacked.cpu().tolist()
            except Exception:
                host = [_one_value(tensors[i]) for i in idx]
            for i, h in zip(idx, host, strict=True):
                out[i] = float(h)
    return out


def _one_value(v: torch.Tensor) -> float:
    """One tensor's value as a float (the slow path of ``resolve_values``), or NaN."""
    import torch

    try:
        return float(v.reshape(()).to(torch.float32).cpu().item())
    except Exception:
        return float("nan")


@dataclass
class _Segment:
    """Consecutive pending rows that resolve together (same transform, device, width)."""

    xs: list[float]
    host: torch.Tensor  # a CPU tensor (rows x width) once the copy has completed
    event: torch.cuda.Event | None  # a CUDA event for an in-flight non-blocking copy
    transform: Transform | None


class HostCopies:
    """The in-flight host copies of one block's rows, in the order they were recorded.

    ``start`` stacks rows and starts their copies; ``ready`` hands back, in order, the
    segments whose copy has completed, each passed through its transform (host tensor
    ``rows x width_in`` -> ``rows x width``) and made a ``rows x width`` float32 tensor.
    """

    def __init__(self, width: int) -> None:
        self.width = width
        self._inflight: list[_Segment] = []

    def __bool__(self) -> bool:
        """Whether some copy has not been handed on yet."""
        return bool(self._inflight)

    def clear(self) -> None:
        """Forget every copy in flight (its rows are lost; used after a failure)."""
        self._inflight.clear()

    def start(self, xs: list[float], rows: list[Row], tfs: list[Transform | None]) -> None:
        """Stack pending rows per segment and start their copies to the host."""
        import torch

        # (No ``torch.no_grad()`` block: on a cold cache entering one costs more than the
        # stack; ``_copy`` detaches the rare result that requires grad instead.)
        if type(rows[0]) is bytes and tfs[0] is None:
            # log() rows (native float32 bytes, log_rows.py) beside rows in flight (the
            # block usually sends them without torch, series.py): joined in C, one tensor
            size = len(rows[0])
            width = size // 4
            raw = [r for r in rows if type(r) is bytes and len(r) == size]
            if len(raw) == len(rows) and not any(tfs):
                flat = array("f", b"".join(raw))
                self._copy(xs, torch.frombuffer(flat, dtype=torch.float32).view(-1, width), None)
                return
        if tfs.count(tfs[0]) == len(tfs) and isinstance(rows[0], torch.Tensor):
            try:
                # The common case: one stack for the whole flush (a non-tensor row among
                # them: torch.stack raises TypeError).
                self._copy(xs, torch.stack(cast("list[torch.Tensor]", rows)), tfs[0])
                return
            except (RuntimeError, TypeError):
                pass  # rows of different widths or devices: segment them
        start = 0
        for end in range(1, len(rows) + 1):
            if end < len(rows) and _same_segment(rows[start], rows[end], tfs[start], tfs[end]):
                continue
            seg_rows = rows[start:end]
            if isinstance(seg_rows[0], torch.Tensor):  # a segment is all tensors, or none
                m = torch.stack([cast("torch.Tensor", r).reshape(-1) for r in seg_rows])
            else:
                m = torch.tensor(
                    [array("f", r) if type(r) is bytes else list(r) for r in seg_rows],
                    dtype=torch.float64,
                )
            self._copy(xs[start:end], m, tfs[start])
            start = end

    def _copy(self, xs: list[float], m: torch.Tensor, transform: Transform | None) -> None:
        import torch

        if m.requires_grad:  # rows recorded without detaching: keep no autograd graph
            m = m.detach()
        event: torch.cuda.Event | None = None
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
        self._inflight.append(_Segment(xs, host, event, transform))

    def ready(self, wait: bool) -> list[tuple[list[float], torch.Tensor]]:
        """Completed segments in order, transformed to ``rows x width`` float32 tensors."""
        import torch

        out: list[tuple[list[float], torch.Tensor]] = []
        while self._inflight:
            seg = self._inflight[0]
            if seg.event is not None and not seg.event.query():
                if not wait:
                    break
                seg.event.synchronize()
            self._inflight.pop(0)
            m = seg.host if seg.transform is None else seg.transform(seg.host)
            # (checked first: each torch call costs more than the check on a cold cache)
            if m.dtype != torch.float32:
                m = m.to(torch.float32)
            shape = (len(seg.xs), self.width)
            if tuple(m.shape) != shape:
                m = m.reshape(shape)
            out.append((seg.xs, m))
        return out


def _same_segment(a: Row, b: Row, ta: Transform | None, tb: Transform | None) -> bool:
    if ta is not tb:
        return False
    da, db = getattr(a, "device", None), getattr(b, "device", None)
    if da != db:
        return False
    if da is None:
        return len(a) == len(b)
    # both on a device: both tensors
    return bool(cast("torch.Tensor", a).numel() == cast("torch.Tensor", b).numel())
