"""The loop's own clip: ``clip_grad_norm_`` and ``clip_grad_value_`` seen at their call.

Why. A loop that clips by itself must be judged on the norms after its clip, and no
remedy may advise the clip it already has (issue #22). With torch.optim the optimizer
step comes after the clip, so the step boundary reads clipped norms; a loop without
torch.optim (the word-language-model example: ``clip_grad_norm_(params, 0.25)`` then
``p.data.add_(p.grad, alpha=-lr)``) is read at the end of backward, before its clip, and
nothing in torch fires between the clip and the hand-made update.

How, at no cost to training. The public functions are left alone (the user's
references to them, however imported, stay the objects torch made). Inside
``torch/nn/utils/clip_grad.py`` each of them looks up a private helper in its module's
globals at every call; those globals are what this module wraps:

- ``_clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)``, which
  ``clip_grad_norm_`` (and the deprecated ``clip_grad_norm``) calls last: our wrapper
  runs it, then tells the step boundary which parameters were clipped and ``max_norm``.
  The gradients are clipped by then: a loop without torch.optim is read there.
- ``_group_tensors_by_device_and_dtype``, which ``clip_grad_value_`` calls before it
  clamps (as do the two norm helpers): when its caller is ``clip_grad_value_`` (a code
  object compare), the wrapper tells the step boundary the gradients and
  ``clip_value`` (read from that frame). Nothing runs after a value clip, so such a
  loop is still read before it; the clip is known (remedies, which rules judge it).

Before the first call is seen, a loop without torch.optim is read at the end of its first
backward pass, before its clip, unless the code that called ``backward()`` names
``clip_grad_norm_`` (``names_norm_clip``: the first user frames' names, looked at once per
model): then its first step waits for the clip too.

One pair of wrappers per process, installed when the extension attaches and put back
when it detaches (only if they are still ours: a later patch by someone else is left in
place). Each costs a Python call and a compare per clip call; a failure in ours is
counted and never raised into the user's clip (R11). A forked child (a DataLoader worker,
a rank) drops the parent's listener.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from types import CodeType, FrameType, ModuleType
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from torch import Tensor

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: ``listener(tensors, kind, bound, grads)``: kind "clip_grad_norm_" or "clip_grad_value_";
#: ``tensors`` are the clipped parameters, or their gradients when ``grads`` (a value
#: clip has consumed its parameters' iterator by the time it is seen).
Listener = Callable[["Sequence[Tensor]", str, float, bool], None]

NORM = "clip_grad_norm_"
VALUE = "clip_grad_value_"


class UserClipHooks:
    """The process's wrappers around torch's clip helpers and the listener they call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.listener: Listener | None = None
        self.on_error: Callable[[str], None] = lambda where: None
        #: (module, name, original, ours) of each installed wrapper.
        self._installed: list[
            tuple[ModuleType, str, Callable[..., object], Callable[..., object]]
        ] = []
        self._value_code: CodeType | None = None

    @property
    def installed(self) -> bool:
        return bool(self._installed)

    def adopt(self, listener: Listener, on_error: Callable[[str], None]) -> bool:
        """Install the wrappers (once) and call ``listener`` from now on; False when
        this torch has no such helpers (the loop's clip is then not seen)."""
        with self._lock:
            self.listener, self.on_error = listener, on_error
            if not self._installed:
                self._install()
            return bool(self._installed)

    def release(self, listener: Listener) -> None:
        """Stop calling ``listener``; put torch's helpers back if still ours."""
        with self._lock:
            if self.listener != listener:  # bound methods: equal, not the same object
                return
            self.listener = None
            for module, name, original, ours in self._installed:
                if getattr(module, name, None) is ours:
                    setattr(module, name, original)
            self._installed = []

    def forked(self) -> None:
        """In a forked child: the parent's listener is not ours to call."""
        self._lock = threading.Lock()
        self.listener = None

    def _install(self) -> None:
        try:
            from torch.nn.utils import clip_grad
        except Exception:
            return
        norm = getattr(clip_grad, "_clip_grads_with_norm_", None)
        group = getattr(clip_grad, "_group_tensors_by_device_and_dtype", None)
        value_fn = getattr(clip_grad, "clip_grad_value_", None)
        value = getattr(value_fn, "__wrapped__", value_fn)
        if callable(norm):
            ours = self._norm_wrapper(norm)
            setattr(clip_grad, "_clip_grads_with_norm_", ours)  # noqa: B010
            self._installed.append((clip_grad, "_clip_grads_with_norm_", norm, ours))
        code = getattr(value, "__code__", None)
        if callable(group) and code is not None:
            self._value_code = code
            ours = self._group_wrapper(group)
            setattr(clip_grad, "_group_tensors_by_device_and_dtype", ours)  # noqa: B010
            self._installed.append((clip_grad, "_group_tensors_by_device_and_dtype", group, ours))

    def _tell(self, tensors: object, kind: str, bound: float, grads: bool = False) -> None:
        listener = self.listener
        if listener is None:
            return
        try:
            if not isinstance(tensors, (list, tuple)):
                tensors = [tensors]
            # what torch's clip helper was given: a list or tuple of tensors, or one tensor
            listener(cast("Sequence[Tensor]", tensors), kind, float(bound), grads)
        except Exception:
            self.on_error("user_clip")

    def _norm_wrapper(
        self, original: Callable[[Tensor | Iterable[Tensor], float, Tensor, bool | None], None]
    ) -> Callable[..., None]:
        tell = self._tell

        def _clip_grads_with_norm_(
            parameters: Tensor | Iterable[Tensor],
            max_norm: float,
            total_norm: Tensor,
            foreach: bool | None = None,
        ) -> None:
            original(parameters, max_norm, total_norm, foreach)
            tell(parameters, NORM, max_norm)

        _clip_grads_with_norm_.__wrapped__ = original  # type: ignore[attr-defined]
        return _clip_grads_with_norm_

    def _group_wrapper(self, original: Callable[_P, _R]) -> Callable[_P, _R]:
        hooks = self

        def _group_tensors_by_device_and_dtype(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                caller = sys._getframe(1)
                if caller.f_code is hooks._value_code and hooks.listener is not None:
                    local = caller.f_locals
                    hooks._tell(local.get("grads"), VALUE, local["clip_value"], True)
            except Exception:
                hooks.on_error("user_clip")
            return original(*args, **kwargs)

        _group_tensors_by_device_and_dtype.__wrapped__ = original  # type: ignore[attr-defined]
        return _group_tensors_by_device_and_dtype


def names_norm_clip(frame: FrameType | None, user_frames: int = 3) -> bool:
    """Whether the code that called ``backward()`` (the first ``user_frames`` frames up
    the stack outside torch and this package) names ``clip_grad_norm_``."""
    import torch

    skip = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
    f, seen = frame, 0
    while f is not None and seen < user_frames:
        code = f.f_code
        if not code.co_filename.startswith(skip):
            if NORM in code.co_names or "clip_grad_norm" in code.co_names:
                return True
            seen += 1
        f = f.f_back
    return False


#: The process's wrappers (one per process, whichever extension instance is loaded).
CLIPS = UserClipHooks()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=CLIPS.forked)
