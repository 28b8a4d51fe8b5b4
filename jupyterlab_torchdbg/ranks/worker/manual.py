"""A rank whose loop updates its weights by hand (no ``torch.optim``): its steps are the
ends of its backward passes.

The kernel finds such models in the notebook's namespace; a rank has no namespace to
scan, so the worker takes the first module it sees called with trainable parameters:
a module forward pre-hook registered for every module (``register_module_forward_pre_hook``)
fires on the outermost call first (the ``DistributedDataParallel`` wrapper), and is
removed at that first call (until then every module call takes torch's slower path with
hooks; a process that never calls a module keeps it, at no cost). The model's end of
backward is then watched with the kernel's own machinery (kernel/backward_boundary.py),
whose boundary runs after DDP has written the averaged gradients.

Every backward pass is a step, from the first: iteration N of a hand-updated loop is its
step N, as iteration N of a loop with an optimizer is that optimizer's step N, so a job
whose ranks update in different ways counts alike (R56: a rank counting one behind
compared its norms with the other ranks' at the wrong iteration, a false desync). A loop
with an optimizer also does a backward pass before its first step: that pass is counted,
and the optimizer's first step, which ends the same iteration, is the *same* step
(``stepped`` returns True: ``Worker.before_step`` does not count it again); it removes
the hooks and the optimizer's steps continue the count from then on (a loop that
accumulates gradients over several passes before its first step has those passes
counted).

No strong reference to the model (R24): the hooks hold it by weakref (``ModelSource``).
A fork child (a DataLoader worker) inherits the pre-hook: it removes itself there.

Switched safely (R41, the rule of kernel/grads/module_hooks.py): torch calls a global
pre-hook from a snapshot of its dict, always as ``hook(module, args)``; once dropped
(taken, or ``remove`` at the worker's end) the hook does nothing, even when a snapshot
taken before still calls it, and ``remove`` is idempotent. The model's hooks are the
end-of-backward hooks, closed by ``remove`` the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...kernel.backward_boundary import BackwardHooks, ModelSource

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle


class ManualModels:
    """The first model a rank calls, watched at the end of each backward pass until an
    optimizer steps it."""

    def __init__(self, fire: Callable[[ModelSource], None], on_error: Callable[[str], None]):
        self.pid = os.getpid()
        self._on_error = on_error
        self.hooks = BackwardHooks(fire, on_error)
        self._handle: RemovableHandle | None = None
        #: Backward passes seen with no optimizer step yet.
        self.passes = 0
        #: The last backward pass was counted as a step and no optimizer has stepped
        #: since: an optimizer step now ends that same iteration.
        self.counted = False
        #: An optimizer has stepped in this process: no model is looked for any more.
        self.optimizer_seen = False

    def install(self) -> None:
        """torch is imported: look for the model at the next module call."""
        self.hooks.attach()
        if not self.hooks.attached or self._handle is not None or self.optimizer_seen:
            return
        from torch.nn.modules.module import register_module_forward_pre_hook

        self._handle = register_module_forward_pre_hook(self._on_forward)

    def remove(self) -> None:
        """The pre-hook and every end-of-backward hook go (safe on any thread)."""
        self._drop_pre_hook()
        self.hooks.detach()

    def _on_forward(self, module: torch.nn.Module, args: object = None, *rest: object) -> None:
        """A module is called (the training thread): take it if it has trainable
        parameters. Returns None (the input is left as it is); never raises; nothing
        once dropped."""
        try:
            if self._handle is None:
                return  # dropped: called from a snapshot taken before
            if os.getpid() != self.pid or self.optimizer_seen:
                self._drop_pre_hook()
                return
            if not any(p.requires_grad for p in module.parameters()):
                return
            self._drop_pre_hook()
            inner = getattr(module, "module", module)  # DDP / FSDP / DataParallel wrap it
            # the kernel's scan, with this one model as the watched one
            self.hooks.scan({}, [(type(inner).__name__.lower(), module)])
        except Exception:
            self._drop_pre_hook()
            self._on_error("manual:find")

    def _drop_pre_hook(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.remove()  # torch iterates a copy of its hook dict: safe from a hook
            except Exception:
                self._on_error("manual:remove")

    @property
    def watching(self) -> bool:
        """Looking for the model, or holding hooks on it (an optimizer step hands over)."""
        return not self.optimizer_seen or bool(self.hooks.sources())

    def counts(self) -> bool:
        """At the end of a backward pass: is it the rank's step?"""
        if self.optimizer_seen:
            return False
        self.passes += 1
        self.counted = True
        return True

    def stepped(self, optimizer: torch.optim.Optimizer) -> bool:
        """An optimizer steps (its pre-hook): its parameters leave the backward hooks.
        True when this step ends the iteration whose backward pass was counted already
        (the same step number: not to be counted again)."""
        again, self.counted = self.counted, False
        self.optimizer_seen = True
        self._drop_pre_hook()
        try:
            self.hooks.optimizer_seen(optimizer)
        except Exception:
            self._on_error("manual:handover")
        return again
