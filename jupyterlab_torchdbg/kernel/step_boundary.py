"""The step boundary: the one owner of torch's hooks into the training step.

Zero code change: ``torch.optim.optimizer.register_optimizer_step_pre_hook`` and
``..._post_hook`` fire around every ``optimizer.step()`` of every optimizer. This module
is the only place that registers them (a test checks it); each feature is called from
here, in this order, written here and nowhere else:

1. **gradients** (``GradMonitor.on_step``) — before the step: gradients are final (after
   DDP's all-reduce, after GradScaler's ``unscale_``). The monitor reads this step's
   per-tensor norms if the step is sampled (every step while clipping is on) and returns
   what it read as a ``StepRead``. It must come first: the recorded norm is the one
   *before* clipping, which is what a user debugging an explosion needs to see.
2. **control** (``Control.at_step``) — before the step, given that ``StepRead``: learning
   rate changes, clipping (reusing the norms just read: one read of the gradients serves
   both), then pause / single step (holding the training thread here).
3. **memory** (``MemoryMonitor.after_step``) — after the step: allocator counters and the
   breakdown see the optimizer state the step just created; actions waiting for a safe
   point (save_checkpoint) run here, between two steps.

Each feature catches its own failures (R11): nothing raises into ``step()`` except the
user's own KeyboardInterrupt while paused. Registration returns handles; ``detach``
removes both (R01). Later boundaries (end of backward for loops without torch.optim, the
per-rank boundary of worker processes) belong here too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

    from .control import Control
    from .grads import GradMonitor
    from .memory import MemoryMonitor

#: The order the features are called in at each step (documentation and tests).
ORDER = ("grads", "control", "memory")


class StepBoundary:
    """Calls gradients -> control before each optimizer step and memory after it."""

    def __init__(
        self,
        grads: GradMonitor,
        control: Control,
        memory: MemoryMonitor,
        on_error: Callable[[str], None],
    ) -> None:
        self.grads = grads
        self.control = control
        self.memory = memory
        self._on_error = on_error
        self._handles: list[RemovableHandle] = []

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def attach(self) -> Callable[[], None]:
        """Register torch's global step hooks (torch is imported); returns ``detach``."""
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        if not self._handles:
            self.grads.attach_torch()
            self._handles = [
                register_optimizer_step_pre_hook(self.before_step),
                register_optimizer_step_post_hook(self.after_step),
            ]
        return self.detach

    def detach(self) -> None:
        """Remove both hooks (torch's hook dicts are as they were before ``attach``)."""
        handles, self._handles = self._handles, []
        for handle in handles:
            try:
                handle.remove()
            except Exception:
                self._on_error("step_boundary:detach")
        self.grads.detach_torch()

    def before_step(
        self, optimizer: torch.optim.Optimizer, args: Any = None, kwargs: Any = None
    ) -> None:
        """torch's step pre-hook: gradients, then control (which may hold here)."""
        read = self.grads.on_step(optimizer)
        self.control.at_step(optimizer, read)

    def after_step(
        self, optimizer: torch.optim.Optimizer, args: Any = None, kwargs: Any = None
    ) -> None:
        """torch's step post-hook: memory."""
        self.memory.after_step(optimizer)
