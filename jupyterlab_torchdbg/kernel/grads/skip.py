"""Skip a non-finite optimizer step: the weights (and the optimizer's state) stay finite.

At a step whose gradients are non-finite, the step boundary's pre-hook sets ``p.grad =
None`` for every parameter the optimizer steps. torch's optimizers (SGD, Adam, AdamW,
RMSprop, ...) skip parameters without a gradient: the weights, the momentum buffers, the
moment estimates and the step counts are left exactly as they were. The gradients are
kept in a list only until the step's post-hook, which puts them back — code after
``step()`` (``zero_grad``, a gradient printout) sees what it would have seen. An
optimizer that touches parameters without gradients (a custom one decaying every weight)
is not kept from doing so; the ``StepRead`` says ``skipped=True`` so training control does
not clip either. A step with a closure is checked after the closure ran; one whose
optimizer evaluates the closure again (LBFGS) is put back from a copy (closure_skip.py).

Holds gradients only within one ``step()`` call (R25): a step that raises leaves them
hidden, and the next step of that optimizer forgets them (its backward made new ones).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class StepSkipper:
    """Gradients hidden from one optimizer step, per optimizer, until its post-hook."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hidden: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def hide(self, optimizer: torch.optim.Optimizer) -> int:
        """Set every gradient of ``optimizer``'s parameters to None; how many were set."""
        hidden: list[tuple[torch.Tensor, torch.Tensor]] = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is not None:
                    hidden.append((p, g))
                    p.grad = None
        with self._lock:
            self._hidden[id(optimizer)] = hidden
        return len(hidden)

    def hidden(self, optimizer: torch.optim.Optimizer) -> bool:
        """This optimizer's step now ending was skipped (its gradients are hidden)."""
        return bool(self._hidden) and id(optimizer) in self._hidden

    def forget(self, optimizer: torch.optim.Optimizer) -> None:
        """A new step began: grads hidden by a step that raised are not put back."""
        if self._hidden:
            with self._lock:
                self._hidden.pop(id(optimizer), None)

    def restore(self, optimizer: torch.optim.Optimizer) -> bool:
        """After the skipped step: put the gradients back (unless new ones were set)."""
        if not self._hidden:
            return False
        with self._lock:
            hidden = self._hidden.pop(id(optimizer), None)
        if hidden is None:
            return False
        for p, g in hidden:
            if p.grad is None:
                p.grad = g
        return True

    def clear(self) -> None:
        with self._lock:
            self._hidden.clear()
