"""``optimizer.step(closure)``: the step boundary runs after the closure made the gradients.

torch's step pre-hook runs before ``step()``'s body, and an optimizer stepped with a
closure (LBFGS must be; every torch optimizer accepts one) computes the gradients inside
the step, by calling the closure: at the pre-hook they are the previous step's. So the
pre-hook hands torch the step's arguments with the closure wrapped (a pre-hook may return
new ``args, kwargs``): when the closure's first call returns, the step boundary's
gradients -> control run (the read, the non-finite guard and its skip, clipping, pause),
before the optimizer reads the gradients; each later call of the same step (LBFGS's
iterations and line search evaluate it again at moved weights) is reported too, so a
skip can still undo the step (grads/closure_skip.py). An optimizer that never calls the
closure has no read at that step.

The wrapper holds the closure and a callback only for the step it is passed to, and never
raises into the user's code: a failing callback is counted, the closure's own result and
exceptions pass through untouched.
"""

from __future__ import annotations

from collections.abc import Callable


def _position(optimizer: object, args: object) -> int:
    """Where a positional closure sits in the hook's ``args`` (torch passes the
    optimizer itself first: ``step(self, closure)``)."""
    return 1 if isinstance(args, tuple) and args and args[0] is optimizer else 0


def closure_of(optimizer: object, args: object, kwargs: object) -> Callable[..., object] | None:
    """The closure ``step`` was called with (positional or keyword), or None."""
    if isinstance(kwargs, dict):
        closure: object = kwargs.get("closure")
        if callable(closure):
            return closure
    i = _position(optimizer, args)
    if isinstance(args, tuple) and len(args) > i and callable(args[i]):
        found: Callable[..., object] = args[i]
        return found
    return None


class ClosureCalls:
    """The user's closure, calling ``after(n)`` once its ``n``-th call has returned."""

    def __init__(
        self,
        closure: Callable[..., object],
        after: Callable[[int], None],
        on_error: Callable[[str], None],
    ) -> None:
        self._closure = closure
        self._after = after
        self._on_error = on_error
        self.calls = 0

    def __call__(self, *args: object, **kwargs: object) -> object:
        loss = self._closure(*args, **kwargs)
        self.calls += 1
        try:
            self._after(self.calls)
        except Exception:
            self._on_error("step_boundary:closure")
        return loss


def wrap(
    optimizer: object,
    args: object,
    kwargs: object,
    after: Callable[[int], None],
    on_error: Callable[[str], None],
) -> tuple[tuple[object, ...], dict[str, object]] | None:
    """``step``'s arguments (as the pre-hook got them) with its closure wrapped
    (``after(n)`` after its n-th call), or None when it was called without one."""
    closure = closure_of(optimizer, args, kwargs)
    if closure is None:
        return None
    wrapped = ClosureCalls(closure, after, on_error)
    new_args: tuple[object, ...] = tuple(args) if isinstance(args, tuple) else ()
    new_kwargs: dict[str, object] = dict(kwargs) if isinstance(kwargs, dict) else {}
    if callable(new_kwargs.get("closure")):
        new_kwargs["closure"] = wrapped
    else:
        i = _position(optimizer, new_args)
        new_args = (*new_args[:i], wrapped, *new_args[i + 1 :])
    return new_args, new_kwargs
