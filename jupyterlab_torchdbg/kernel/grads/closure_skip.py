"""Skipping a non-finite step of an optimizer stepped with a closure (R48).

The closure's first call makes the gradients the step boundary reads (closure_step.py);
the guard checks them there, before the optimizer reads them, and a non-finite step has
its gradients hidden (skip.py). That is the whole skip for torch's single-evaluation
optimizers (SGD, Adam, ... call the closure once, then skip parameters without a
gradient). An optimizer that evaluates the closure again within the step (LBFGS: its
iterations and line search, at weights it has already moved; or one this tool does not
know) is different: hidden gradients end LBFGS's step at once (a zero gradient meets its
tolerance) but after its counters moved, and a later evaluation can turn non-finite after
the weights changed. So, while skipping is on, such a step starts with a copy of the
weights and of the optimizer's state (tensors cloned, lists and dicts copied one level:
LBFGS replaces its history tensors, never writes into them); every later evaluation is
checked (NaN/Inf values, one host read: skipping reads the device anyway), and a step
found non-finite at any evaluation is put back from the copy after it (the post-hook),
weights and state as before the step. The copy lives for one step only (R25).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, cast

from .skip_facts import skips_without_grad

if TYPE_CHECKING:
    import torch


def _copied(v: object) -> object:
    if hasattr(v, "clone") and hasattr(v, "device"):
        return cast("torch.Tensor", v).detach().clone()  # duck-typed as before: a tensor
    if isinstance(v, list):
        return list(v)
    if isinstance(v, dict):
        return dict(v)
    return v


class StepCopy:
    """The weights and the optimizer's state as they were before one step."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        import torch

        with torch.no_grad():
            self.params = [
                (p, p.detach().clone()) for g in optimizer.param_groups for p in g["params"]
            ]
            self.state = {
                id(p): (p, {k: _copied(v) for k, v in st.items()})
                for p, st in list(optimizer.state.items())
                if isinstance(st, dict)
            }
        #: Some evaluation of the closure in this step was non-finite.
        self.bad = False

    def restore(self, optimizer: torch.optim.Optimizer) -> None:
        import torch

        with torch.no_grad():
            for p, saved in self.params:
                p.copy_(saved)
        state = optimizer.state
        for p in list(state.keys()):
            if id(p) not in self.state:
                del state[p]  # made by this step (LBFGS's first one)
        for p, saved_state in self.state.values():
            cur = state[p]
            cur.clear()
            cur.update(saved_state)


def grads_finite(optimizer: torch.optim.Optimizer) -> bool:
    """No gradient of the optimizer's parameters holds NaN/Inf (one host read)."""
    import torch

    flags: list[torch.Tensor] = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            if g.layout != torch.strided:
                g = g.coalesce().values() if g.layout == torch.sparse_coo else g.values()
            flag = torch.isfinite(g).all()
            flags.append(flag.to(flags[0].device) if flags else flag)
    return not flags or bool(torch.stack(flags).all())


class ClosureSkips:
    """Per optimizer, the copy of the step now being taken with a closure (skip on)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._copies: dict[int, StepCopy] = {}

    def begin(self, optimizer: torch.optim.Optimizer, skipping: bool) -> None:
        """A step with a closure begins (its pre-hook, before the closure runs)."""
        copy = StepCopy(optimizer) if skipping and not skips_without_grad(optimizer) else None
        with self._lock:
            if copy is None:
                self._copies.pop(id(optimizer), None)
            else:
                self._copies[id(optimizer)] = copy

    def holds(self, optimizer: object) -> bool:
        """This step of ``optimizer`` will be put back from a copy if it is skipped."""
        return id(optimizer) in self._copies

    def later(self, optimizer: torch.optim.Optimizer) -> bool:
        """A later evaluation of the closure has returned: True the first time one is
        found non-finite (the caller hides the gradients and tells)."""
        copy = self._copies.get(id(optimizer))
        if copy is None or copy.bad or grads_finite(optimizer):
            return False
        copy.bad = True
        return True

    def bad(self, optimizer: object) -> bool:
        copy = self._copies.get(id(optimizer))
        return copy is not None and copy.bad

    def end(self, optimizer: torch.optim.Optimizer, skipped: bool) -> bool:
        """The step's post-hook: a skipped step is put back from its copy; whether it was."""
        with self._lock:
            copy = self._copies.pop(id(optimizer), None)
        if copy is None or not (skipped or copy.bad):
            return False
        copy.restore(optimizer)
        return True

    def clear(self) -> None:
        with self._lock:
            self._copies.clear()
