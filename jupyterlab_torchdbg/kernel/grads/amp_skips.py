"""The steps GradScaler skipped inside a fused optimizer's kernel, known without a sync (R31).

A fused optimizer (``Adam(fused=True)``) stepped by ``scaler.step`` reaches the step hooks
even when GradScaler found inf/NaN: its kernel skips the update on ``found_inf``
(gradscaler.py). Such a row's norms are non-finite, yet the step is GradScaler's ordinary
skip, never a non-finite alarm, and it updates nothing: like an ordinary optimizer's
skipped step, which never reaches the hooks, it is left out of the alarm check and the
table (the chart still shows its point: the scaled gradients held inf/NaN). Whether
GradScaler skipped it is ``found_inf``: on the CPU read at once; on an accelerator copied
to pinned host memory without blocking (R26) and read at the alarm check, after the
step's row, which was copied later on the same stream. Holds a few host floats, never a
tensor of the user's or GradScaler's.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Flags in flight at most (older ones are dropped: their rows are then judged as any).
MAX_PENDING = 256


class AmpSkips:
    """Per track: steps whose fused step GradScaler skipped (``found_inf`` non-zero)."""

    def __init__(self) -> None:
        self._known: set[int] = set()
        #: (step, its flag on the host, the copy's event: None for a plain copy)
        self._pending: deque[tuple[int, torch.Tensor, torch.cuda.Event | None]] = deque()

    def note(self, step: int, found_inf: torch.Tensor) -> None:
        """This sampled step went through ``scaler.step`` with this ``found_inf``."""
        import torch

        flag = found_inf.detach().reshape(())
        if flag.device.type == "cpu":
            if bool(flag != 0):
                self._known.add(step)
            return
        if len(self._pending) >= MAX_PENDING:
            self._pending.popleft()
        if flag.device.type != "cuda":  # no event API here: a plain copy
            self._pending.append((step, flag.float().cpu(), None))
            return
        host = torch.empty((), dtype=torch.float32, pin_memory=True)
        host.copy_(flag, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(flag.device))
        self._pending.append((step, host, event))

    def skipped(self, upto: float) -> set[int]:
        """The steps up to ``upto`` GradScaler skipped, each told once. A flag of those
        steps is read now: its copy was queued before the rows being judged, whose copy
        has completed, so waiting on its event costs nothing."""
        while self._pending and self._pending[0][0] <= upto:
            step, host, event = self._pending.popleft()
            if event is not None and not event.query():
                event.synchronize()  # another stream than the rows': not seen in practice
            if float(host) != 0:
                self._known.add(step)
        out = {s for s in self._known if s <= upto}
        self._known -= out
        return out

    def clear(self) -> None:
        self._known.clear()
        self._pending.clear()
