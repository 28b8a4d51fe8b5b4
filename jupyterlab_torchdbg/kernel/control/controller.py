"""Live training control: clip, pause / resume / single step, learning-rate scaling.

Actions arrive on the comm; with kernel subshells (ipykernel >= 7, JupyterLab >= 4.4)
their handlers run on another thread while the training cell runs. Handlers only change
a few fields under a lock (the mailbox); the training thread applies them when the step
boundary calls ``at_step`` — after the gradient monitor read this step's norms (so the
monitor records the norm *before* clipping, and clipping reuses that read; clip.py).
Nothing happens mid-backward (R12).

- Pause holds the loop inside the pre-hook, waiting on an Event in short slices so that a
  kernel interrupt (KeyboardInterrupt) ends the pause and the cell cleanly. Pausing needs
  the action to have come over a subshell: otherwise nothing could deliver Resume.
- ``at_step`` never raises into ``step()`` (R11) except the user's own KeyboardInterrupt.
- A loop that updates its weights by hand has no optimizer step: the step boundary calls
  ``at_step`` at the end of its backward pass instead, with the model's ``ModelSource``
  (backward_boundary.py) in place of the optimizer. Clipping and pause work there, before
  the manual update; a learning rate that lives in the user's loop cannot be scaled, so
  LR scaling is refused for it with the reason.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import TYPE_CHECKING, Any, cast

from ..action_registry import ActionError
from ..backward_boundary import ModelSource
from .clip import Clipper

if TYPE_CHECKING:
    import torch

    from ..host import Host
    from ..step_read import StepRead


class Control:
    def __init__(self, ext: Host) -> None:
        self._ext = ext
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self.clip: float | None = None
        self.paused = False
        self.paused_at: int | None = None
        self._step_once = False
        self.lr_scale: float | None = None
        self._lr_pending: float | None = None  # factor to apply at the next boundary
        self._lr_reset = False
        self.steps = 0
        self.last_refusal: str | None = None
        self.clipper = Clipper(self._refuse)
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._names: dict[int, str] = {}

    # --- state message ---------------------------------------------------------------

    def state(self) -> dict[str, object]:
        return {
            "method": "control",
            "clip": self.clip,
            "paused": self.paused,
            "paused_at": self.paused_at,
            "step": self.steps,
            "lr_scale": self.lr_scale,
            "optimizers": sorted(
                self._names.get(id(o), type(o).__name__) for o in self._optimizers
            ),
            "last_refusal": self.last_refusal,
        }

    def broadcast(self) -> None:
        self._ext.hub.broadcast(self.state())

    # --- actions (any thread) --------------------------------------------------------

    def _on_main_thread(self) -> bool:
        return threading.current_thread() is threading.main_thread()

    def act_clip(self, args: dict[str, Any]) -> dict[str, object]:
        with self._lock:
            self.clip = args["max_norm"]
            self.last_refusal = None
        self.broadcast()
        return {"clip": self.clip, "applies": "from the next optimizer step"}

    def act_unclip(self, args: dict[str, object]) -> dict[str, object]:
        with self._lock:
            self.clip = None
        self.broadcast()
        return {"clip": None}

    def act_pause(self, args: dict[str, object]) -> dict[str, object]:
        if self._on_main_thread():
            raise ActionError(
                "pausing needs comms over a kernel subshell (ipykernel >= 7 and JupyterLab "
                ">= 4.4 with 'Kernel comms over subshells' on): otherwise Resume could not "
                "reach the paused kernel",
                code="refused",
            )
        with self._lock:
            self.paused = True
            self._step_once = False
        self.broadcast()
        return {"paused": True, "applies": "at the next optimizer step"}

    def act_resume(self, args: dict[str, object]) -> dict[str, object]:
        with self._lock:
            self.paused = False
            self._step_once = False
        self._wake.set()
        self.broadcast()
        return {"paused": False}

    def act_step(self, args: dict[str, object]) -> dict[str, object]:
        with self._lock:
            if not self.paused:
                raise ActionError("not paused: Step lets one step through a pause", "refused")
            self._step_once = True
        self._wake.set()
        return {"step": "one optimizer step"}

    def act_scale_lr(self, args: dict[str, Any]) -> dict[str, object]:
        if self._only_by_hand():
            raise ActionError(_NO_OPTIMIZER, "refused")
        with self._lock:
            self._lr_pending = (self._lr_pending or 1.0) * args["factor"]
            self._lr_reset = False
            preview = (self.lr_scale or 1.0) * self._lr_pending
        return {"lr_scale": preview, "applies": "at the next optimizer step"}

    def act_reset_lr(self, args: dict[str, object]) -> dict[str, object]:
        with self._lock:
            self._lr_pending = None
            self._lr_reset = True
        return {"lr_scale": None, "applies": "at the next optimizer step"}

    # --- the step boundary (training thread) ------------------------------------------

    @property
    def clipping(self) -> bool:
        """The clip action is on (the monitor then reads every step's norms for it)."""
        return self.clip is not None

    def at_step(
        self, optimizer: torch.optim.Optimizer | ModelSource, read: StepRead | None
    ) -> None:
        """The step boundary, after the gradient monitor's read (``read``) of this step
        (a ``ModelSource`` at the end of backward of a model updated by hand)."""
        try:
            self._boundary(optimizer, read)
        except KeyboardInterrupt:
            # The user interrupted the kernel while paused: end the pause, let it propagate.
            with self._lock:
                self.paused = False
                self._step_once = False
                self.paused_at = None
            self.broadcast()
            raise
        except Exception:
            self._ext.count_error("control")

    def _boundary(
        self, optimizer: torch.optim.Optimizer | ModelSource, read: StepRead | None
    ) -> None:
        if optimizer not in self._optimizers:
            self._optimizers.add(optimizer)
            self._names[id(optimizer)] = self._name_of(optimizer)
        self.steps += 1
        with self._lock:
            lr_factor, self._lr_pending = self._lr_pending, None
            lr_reset, self._lr_reset = self._lr_reset, False
            clip = self.clip
        if lr_factor is not None or lr_reset:
            self._apply_lr(lr_factor, lr_reset)
        if clip is not None and not (read is not None and read.skipped):  # skipped: no step
            # A ModelSource has the optimizer's param_groups: all that clipping reads.
            self.clipper.clip(cast("torch.optim.Optimizer", optimizer), clip, self.steps, read)
        if self.paused:
            self._hold()

    def _hold(self) -> None:
        with self._lock:
            if self._step_once:  # a Step arrived before we got here: let this one through
                self._step_once = False
                return
            self.paused_at = self.steps
        self._ext.stream.flush()
        self.broadcast()
        while True:
            self._wake.wait(0.1)
            with self._lock:
                self._wake.clear()
                if not self.paused:
                    self.paused_at = None
                    break
                if self._step_once:
                    self._step_once = False
                    break
        self.broadcast()

    def post_run_cell(self) -> None:
        """The training cell ended: refusals still in flight from the device arrive now."""
        self.clipper.check_refusals(wait=True)

    def release(self) -> None:
        """Unload: never leave a loop paused behind an unloaded extension."""
        self.paused = False
        self._wake.set()

    def _refuse(self, why: str) -> None:
        self.last_refusal = why
        self.broadcast()

    def _apply_lr(self, factor: float | None, reset: bool) -> None:
        current = self.lr_scale or 1.0
        change = (1.0 / current) if reset else (factor or 1.0)
        if self._only_by_hand():
            self._refuse(_NO_OPTIMIZER)
            return
        for opt in list(self._optimizers):
            if isinstance(opt, ModelSource):
                continue
            for group in opt.param_groups:
                lr = group.get("lr")
                if isinstance(lr, float):
                    group["lr"] = lr * change
                elif hasattr(lr, "mul_"):  # tensor LR (capturable optimizers)
                    lr.mul_(change)
        scale = 1.0 if reset else current * change
        self.lr_scale = None if math.isclose(scale, 1.0) else scale
        self.broadcast()

    def _only_by_hand(self) -> bool:
        """Every boundary seen so far is the end of a backward (no optimizer to scale)."""
        seen = list(self._optimizers)
        return bool(seen) and all(isinstance(o, ModelSource) for o in seen)

    def _name_of(self, optimizer: torch.optim.Optimizer | ModelSource) -> str:
        if isinstance(optimizer, ModelSource):
            return f"{optimizer.name} (end of backward)"
        ns: dict[str, object] = getattr(self._ext.shell, "user_ns", {}) or {}
        for k, v in list(ns.items()):
            if v is optimizer and not k.startswith("_"):
                return k
        return type(optimizer).__name__


_NO_OPTIMIZER = (
    "learning-rate scaling needs a torch.optim optimizer: this loop updates its weights "
    "by hand (read at the end of backward), so its learning rate is a variable of your "
    "code; change it there"
)
