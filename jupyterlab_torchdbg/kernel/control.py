"""Live training control: clip, pause / resume / single step, learning-rate scaling.

Actions arrive on the comm; with kernel subshells (ipykernel >= 7, JupyterLab >= 4.4)
their handlers run on another thread while the training cell runs. Handlers only change
a few fields under a lock (the mailbox); the training thread applies them at the next
optimizer-step boundary (a global step pre-hook, registered after the gradient monitor's,
so the monitor records the norm *before* clipping). Nothing happens mid-backward (R12).

- Clip is exactly ``torch.nn.utils.clip_grad_norm_(params, max_norm)``: the same total norm
  (``get_total_norm``) and the same in-place scaling (``clip_grads_with_norm_``). The total
  comes from the per-tensor norms the gradient monitor read at this very step (it samples
  every step while clipping is on), so one read of the gradients serves both. A step whose
  total norm is non-finite, or whose gradients still carry GradScaler's loss scale, is not
  clipped and the refusal is reported (R32).
- Pause holds the loop inside the pre-hook, waiting on an Event in short slices so that a
  kernel interrupt (KeyboardInterrupt) ends the pause and the cell cleanly. Pausing needs
  the action to have come over a subshell: otherwise nothing could deliver Resume.
- The hook never raises into ``step()`` (R11) except the user's own KeyboardInterrupt.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any

from .actions import ActionError, finite_number, no_args, only_keys

if TYPE_CHECKING:
    from .extension import Extension

#: Largest accepted clip level / LR factor (1e309 and friends are rejected as non-finite).
MAX_NORM_LIMIT = 1e12
MAX_LR_FACTOR = 1e3
#: Clip refusal flags in flight from an accelerator at most (then reports are skipped).
MAX_PENDING_CHECKS = 64
#: Devices whose norms the host may read at once (no sync): others get the device guard.
HOST_CHECKED = frozenset({"cpu"})


class Control:
    def __init__(self, ext: Extension) -> None:
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
        #: Clipped steps whose total norm came from the monitor's read (not a second one).
        self.reused = 0
        #: Accelerator steps whose "was the norm finite" flag is on its way to the host.
        self._checks: deque[tuple[int, Any, Any]] = deque()
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._names: dict[int, str] = {}

    # --- state message ---------------------------------------------------------------

    def state(self) -> dict[str, Any]:
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

    def act_clip(self, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.clip = args["max_norm"]
            self.last_refusal = None
        self.broadcast()
        return {"clip": self.clip, "applies": "from the next optimizer step"}

    def act_unclip(self, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.clip = None
        self.broadcast()
        return {"clip": None}

    def act_pause(self, args: dict[str, Any]) -> dict[str, Any]:
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

    def act_resume(self, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.paused = False
            self._step_once = False
        self._wake.set()
        self.broadcast()
        return {"paused": False}

    def act_step(self, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if not self.paused:
                raise ActionError("not paused: Step lets one step through a pause", "refused")
            self._step_once = True
        self._wake.set()
        return {"step": "one optimizer step"}

    def act_scale_lr(self, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._lr_pending = (self._lr_pending or 1.0) * args["factor"]
            self._lr_reset = False
            preview = (self.lr_scale or 1.0) * self._lr_pending
        return {"lr_scale": preview, "applies": "at the next optimizer step"}

    def act_reset_lr(self, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._lr_pending = None
            self._lr_reset = True
        return {"lr_scale": None, "applies": "at the next optimizer step"}

    # --- the step boundary (training thread) ------------------------------------------

    def hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            self._boundary(optimizer)
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

    def _boundary(self, optimizer: Any) -> None:
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
        if clip is not None:
            self._clip(optimizer, clip)
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

    def _clip(self, optimizer: Any, max_norm: float) -> None:
        import torch

        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if not params:
            return
        scaled = _still_scaled(optimizer, self._ext)
        if scaled is not None:
            self.last_refusal = f"step {self.steps}: {scaled}; not clipped"
            self.broadcast()
            return
        total = self._reused_total(optimizer, params)
        if total is None:
            total = torch.nn.utils.get_total_norm([p.grad for p in params], 2.0)
        else:
            self.reused += 1
        if total.device.type in HOST_CHECKED:
            if not bool(torch.isfinite(total)):  # a host value: no sync to ask
                self._refuse_non_finite(self.steps, float(total))
                return
            torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
            return
        # On an accelerator, asking the host whether the norm is finite would sync at every
        # step (R26). The guard stays on the device instead: a non-finite total becomes 0,
        # for which clip_grads_with_norm_'s factor clamps to exactly 1 (grads untouched);
        # a finite total is passed through unchanged, so the result is bit for bit
        # clip_grad_norm_'s. Whether it was refused is read back later, without waiting.
        finite = torch.isfinite(total)
        guarded = torch.where(finite, total, torch.zeros_like(total))
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, guarded)
        self._watch_finite(self.steps, finite, total)
        self._check_refusals()

    def _refuse_non_finite(self, step: int, total: float) -> None:
        self.last_refusal = (
            f"step {step}: total gradient norm is {total}; not clipped "
            "(clipping cannot repair NaN/Inf gradients: see the gradient alarms)"
        )
        self.broadcast()

    def _watch_finite(self, step: int, finite: Any, total: Any) -> None:
        """Start a non-blocking copy of this step's finiteness flag to the host."""
        import torch

        if len(self._checks) >= MAX_PENDING_CHECKS:
            return  # the device is far behind: skip a report rather than wait
        flags = torch.stack([finite.float(), total.float()])
        if total.device.type != "cuda":  # other accelerators: no event API here, so wait
            self._checks.append((step, flags.cpu(), None))
            return
        host = torch.empty((2,), dtype=torch.float32, pin_memory=True)
        host.copy_(flags, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._checks.append((step, host, event))

    def _check_refusals(self, wait: bool = False) -> None:
        """Report steps whose clip was refused, once their flags have reached the host."""
        while self._checks:
            step, host, event = self._checks[0]
            if event is not None and not event.query():
                if not wait:
                    return
                event.synchronize()
            self._checks.popleft()
            ok, total = host.tolist()
            if not ok:
                self._refuse_non_finite(step, total)

    def _reused_total(self, optimizer: Any, params: list[Any]) -> Any:
        """``get_total_norm`` of the grads from the norms the monitor read this step.

        The monitor's step hook runs first and, while clipping is on, samples every step
        (one ``_foreach_norm`` over the grads); its per-tensor norms are exactly what
        ``get_total_norm`` computes, so the total is one ``vector_norm`` of a short vector
        in the same order: bit for bit the same as ``clip_grad_norm_`` (tested). None when
        the monitor did not read this step, its scope misses some of these gradients, or
        it read them in another dtype (fp16/bf16 grads are normed in fp32 there).
        """
        import torch

        from .grads import current_monitor

        mon = current_monitor()
        got = mon.step_norms(optimizer) if mon is not None else None
        if got is None:
            return None
        plan_params, norms = got
        if any(p.grad.dtype != norms.dtype for p in params):
            return None
        if len(plan_params) == len(params) and all(
            a is b for a, b in zip(plan_params, params, strict=True)
        ):
            picked = norms
        else:
            pos = {id(p): i for i, p in enumerate(plan_params)}
            idx = [pos.get(id(p)) for p in params]
            if None in idx:
                return None
            picked = norms[torch.tensor(idx, device=norms.device)]
        return torch.linalg.vector_norm(picked, 2.0)

    def _apply_lr(self, factor: float | None, reset: bool) -> None:
        current = self.lr_scale or 1.0
        change = (1.0 / current) if reset else (factor or 1.0)
        for opt in list(self._optimizers):
            for group in opt.param_groups:
                lr = group.get("lr")
                if isinstance(lr, float):
                    group["lr"] = lr * change
                elif hasattr(lr, "mul_"):  # tensor LR (capturable optimizers)
                    lr.mul_(change)
        scale = 1.0 if reset else current * change
        self.lr_scale = None if math.isclose(scale, 1.0) else scale
        self.broadcast()

    def _name_of(self, optimizer: Any) -> str:
        ns = getattr(self._ext.shell, "user_ns", {}) or {}
        for k, v in list(ns.items()):
            if v is optimizer and not k.startswith("_"):
                return k
        return type(optimizer).__name__


def _still_scaled(optimizer: Any, ext: Extension) -> str | None:
    """Why this step's gradients may still carry GradScaler's loss scale (R32), or None.

    ``scaler.step(optimizer)`` unscales before it calls ``optimizer.step()``, so the step
    hook sees true gradients (stage UNSCALED). A step that bypasses it while an enabled
    GradScaler is scaling this optimizer's loss would clip scaled gradients.
    """
    from .grads import current_monitor

    mon = current_monitor()
    track = mon.track_for(optimizer) if mon is not None else None
    plan = track.plan if track is not None else None
    scaler = plan.scaler() if plan is not None and plan.scaler is not None else None
    if scaler is None or not getattr(scaler, "_enabled", False):
        return None
    if getattr(scaler, "_scale", None) is None:
        return None  # has never scaled anything
    states = getattr(scaler, "_per_optimizer_states", None)
    st = states.get(id(optimizer)) if isinstance(states, dict) else None
    if isinstance(st, dict) and getattr(st.get("stage"), "name", None) == "UNSCALED":
        return None
    return (
        "the gradients may still be multiplied by GradScaler's loss scale (optimizer.step() "
        "was called directly, not through scaler.step(optimizer), which unscales first); "
        "step through the scaler or call scaler.unscale_(optimizer) before stepping"
    )


def _clip_args(args: dict[str, Any]) -> dict[str, Any]:
    only_keys(args, {"max_norm"})
    v = finite_number(args, "max_norm", minimum=0, exclusive_minimum=True, maximum=MAX_NORM_LIMIT)
    return {"max_norm": v}


def _lr_args(args: dict[str, Any]) -> dict[str, Any]:
    only_keys(args, {"factor"})
    v = finite_number(args, "factor", minimum=0, exclusive_minimum=True, maximum=MAX_LR_FACTOR)
    return {"factor": v}


def attach(ext: Extension) -> None:
    control = Control(ext)
    ext.control = control  # type: ignore[attr-defined]
    for name, validate, handler in (
        ("clip", _clip_args, control.act_clip),
        ("unclip", no_args, control.act_unclip),
        ("pause", no_args, control.act_pause),
        ("resume", no_args, control.act_resume),
        ("step", no_args, control.act_step),
        ("scale_lr", _lr_args, control.act_scale_lr),
        ("reset_lr", no_args, control.act_reset_lr),
    ):
        ext.add_cleanup(ext.actions.register(name, validate, handler))
    ext.add_cleanup(ext.hub.add_snapshot_part(lambda: [control.state()]))

    def cell_ended(result: Any = None) -> None:
        if ext.others_running():
            return  # a probe cell on a subshell: the training cell's end collects them
        try:  # refusals still in flight from the device are reported with the cell's end
            control._check_refusals(wait=True)
        except Exception:
            ext.count_error("control")

    events = ext.shell.events
    events.register("post_run_cell", cell_ended)
    ext.add_cleanup(lambda: events.unregister("post_run_cell", cell_ended))

    def on_torch(ext: Extension) -> Any:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        handle = register_optimizer_step_pre_hook(control.hook)

        def remove() -> None:
            handle.remove()
            # never leave a loop paused behind an unloaded extension
            control.paused = False
            control._wake.set()

        return remove

    ext.on_torch(on_torch)
