"""Live training control: clip, pause / resume / single step, learning rates.

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
- Per run (runs.py): ``step`` and ``paused_at`` count the current run's boundaries; the
  learning rates are per optimizer (lr.py), read at each boundary and shown as they are;
  a run that ends drops pending changes. While idle (no step for a few seconds, or no
  run) pause, step and learning-rate changes are refused with the reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from ..action_registry import ActionError
from ..backward_boundary import ModelSource
from ..runs import name_of
from .clip import Clipper
from .lr import Change, LrTargets, Target

if TYPE_CHECKING:
    import torch

    from ..host import Host
    from ..runs import Runs
    from ..step_read import StepRead


IDLE = "Idle: nothing is training"
IDLE_LR = "nothing is training: set the learning rate in your cell"
_NO_OPTIMIZER = (
    "learning-rate changes need a torch.optim optimizer: this loop updates its weights "
    "by hand (read at the end of backward), so its learning rate is a variable of your "
    "code; change it there"
)

#: Learning-rate readings are broadcast at most this often.
LR_BROADCAST_S = 0.5


class Control:
    def __init__(self, ext: Host) -> None:
        self._ext = ext
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self.clip: float | None = None
        self.paused = False
        self.paused_at: int | None = None
        self._step_once = False
        #: Step boundaries in the current run (``run``).
        self.steps = 0
        self.run: int | None = None
        self.last_refusal: str | None = None
        self.clipper = Clipper(self._refuse)
        self.lr = LrTargets()
        self._lr_sent = -1e18
        self._lr_dirty = False
        #: Run while a loop is held paused: the held boundary is a safe point, so actions
        #: waiting for one (Save checkpoint, Replay) are served there, not refused after
        #: their timeout (the extension wires the features' job queues).
        self.serve_while_held: list[Callable[[], None]] = []

    # --- state message ---------------------------------------------------------------

    def _runs(self) -> Runs | None:
        return self._ext.runs

    def idle(self) -> bool:
        """Nothing is training now (runs.py); never while the loop is held paused."""
        runs = self._runs()
        return False if runs is None or self.paused_at is not None else bool(runs.idle())

    def state(self) -> dict[str, object]:
        with self._lock:
            targets = list(self.lr.targets.values())
            default = self.lr.resolve(None)
        idle = self.idle()
        runs = self._runs()
        last = runs.last if runs is not None else None
        run = last.id if last is not None else self.run
        return {
            "method": "control",
            "clip": self.clip,
            "paused": self.paused,
            "paused_at": self.paused_at,
            # the step boundaries of the run named below: none yet when the newest run has
            # not stepped (a log()-only run after an optimizer's run)
            "step": self.steps if run == self.run else 0,
            "lr_scale": default.scale if default is not None else None,
            "optimizers": sorted({t.name for t in targets}),
            "last_refusal": self.last_refusal,
            "idle": idle,
            "run": run,
            "targets": [t.to_json(not idle and t.ref() is not None) for t in targets],
            "target": default.key if default is not None else None,
        }

    def broadcast(self) -> None:
        self._ext.hub.broadcast(self.state())

    def on_run(self, event: str, run: object) -> None:
        """runs.py (any thread): a run ended (pending changes dropped) or stepping stopped
        or resumed within it (``idle`` changed). A start is told by the step boundary that
        follows it, once the new run's targets are known."""
        if event == "start":
            return
        if event == "end":
            with self._lock:
                self.lr.drop_pending()
                self.lr.run_ended()
        self.broadcast()

    # --- actions (any thread) --------------------------------------------------------

    def _on_main_thread(self) -> bool:
        return threading.current_thread() is threading.main_thread()

    def _refuse_idle(self, why: str = IDLE) -> None:
        if self.idle():
            raise ActionError(why, code="refused")

    def act_clip(self, args: dict[str, object]) -> dict[str, object]:
        max_norm = _number(args, "max_norm")
        with self._lock:
            self.clip = max_norm
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
        self._refuse_idle()
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
        self._refuse_idle()
        with self._lock:
            if not self.paused:
                raise ActionError("not paused: Step lets one step through a pause", "refused")
            self._step_once = True
        self._wake.set()
        return {"step": "one optimizer step"}

    def _lr_target(self, args: dict[str, object], *, idle_ok: bool = False) -> Target:
        """The target an LR action is for (under the lock); refused or invalid. Only
        Reset (``idle_ok``) acts on the last run's targets while nothing trains."""
        if self.idle() and not idle_ok:
            raise ActionError(IDLE_LR, "refused")
        key = args.get("optimizer")
        t = self.lr.resolve(key if isinstance(key, str) else None)
        if t is None:
            if "optimizer" in args:
                raise ActionError(f"no optimizer {args['optimizer']!r} in this run")
            raise ActionError(IDLE_LR, "refused")
        if t.by_hand:
            raise ActionError(_NO_OPTIMIZER, "refused")
        return t

    def _queue(self, args: dict[str, object], change: Change) -> dict[str, object]:
        with self._lock:
            t = self._lr_target(args)
            if change[2] is not None and change[2] >= len(t.lrs):
                raise ActionError(f"{t.name} has {len(t.lrs)} param group(s)")
            t.pending.append(change)
            key = t.key
        return {"optimizer": key, "pending": True, "applies": "at the next optimizer step"}

    def act_set_lr(self, args: dict[str, object]) -> dict[str, object]:
        group = args.get("group")
        out = self._queue(
            args, ("set", float(_number(args, "lr")), group if isinstance(group, int) else None)
        )
        return {**out, "lr": args["lr"]}

    def act_scale_lr(self, args: dict[str, object]) -> dict[str, object]:
        out = self._queue(args, ("scale", float(_number(args, "factor")), None))
        with self._lock:
            t = self.lr.resolve(cast("str", out["optimizer"]))
            scale = (t.scale if t is not None else None) or 1.0
            for op, value, _ in t.pending if t is not None else []:
                scale = scale * value if op == "scale" else scale
        return {**out, "lr_scale": scale}

    def act_reset_lr(self, args: dict[str, object]) -> dict[str, object]:
        """Back to the lr from before the panel's first change. While a run steps, at
        its next step; while idle (the run ended), at once: the user asked for it and
        nothing steps, so nothing waits for a boundary that may never come (issue #22)."""
        applies = "at the next optimizer step"
        with self._lock:
            t = self._lr_target(args, idle_ok=True)
            opt = t.ref()
            if not t.changed:
                if not t.pending:
                    raise ActionError(
                        "nothing to reset: the learning rate was not changed from the panel",
                        "refused",
                    )
                t.pending.clear()  # the changes not applied yet are simply dropped
            elif self.idle():
                if opt is None:
                    raise ActionError(f"{t.name} no longer exists", "refused")
                t.pending.clear()
                self.lr.apply(t, opt, [("reset", 0.0, None)])
                applies = "now (nothing is training)"
            else:
                t.pending.append(("reset", 0.0, None))
            key = t.key
        if applies.startswith("now"):
            self.broadcast()
        return {"optimizer": key, "lr_scale": None, "applies": applies}

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
            self._interrupted()
            raise
        except Exception:
            self._ext.count_error("control")

    def _interrupted(self) -> None:
        # The user interrupted the kernel while paused: end the pause, let it propagate.
        with self._lock:
            self.paused = False
            self._step_once = False
            self.paused_at = None
        self._hold_run(False)
        self.broadcast()

    def pause_here(self) -> None:
        """Pause now, at this boundary, exactly as Pause does (the memory guard, after an
        optimizer step on the training thread); Resume or Step continues."""
        with self._lock:
            self.paused, self._step_once = True, False
        try:
            self._hold()
        except KeyboardInterrupt:
            self._interrupted()
            raise

    def _boundary(
        self, optimizer: torch.optim.Optimizer | ModelSource, read: StepRead | None
    ) -> None:
        runs = self._runs()
        run = runs.current_id if runs is not None else None
        news = False
        if run != self.run:  # a new run: its own step numbering and targets
            with self._lock:
                self.run, self.steps = run, 0
                self.lr.new_run()
            news = True
        self.steps += 1
        with self._lock:
            known = len(self.lr.targets)
            t = self.lr.seen(optimizer, lambda: self._name_of(optimizer))
            news = news or len(self.lr.targets) != known
            changes, t.pending = t.pending, []
            clip = self.clip
            if changes and not t.by_hand:
                self.lr.apply(t, optimizer, changes)
                news = True
            elif self.lr.read(t, optimizer):
                self._lr_dirty = True
        now = time.monotonic()
        if news or (self._lr_dirty and now - self._lr_sent >= LR_BROADCAST_S):
            self._lr_dirty, self._lr_sent = False, now
            self.broadcast()
        if clip is not None and not (read is not None and read.skipped):  # skipped: no step
            # A ModelSource has the optimizer's param_groups: all that clipping reads.
            self.clipper.clip(cast("torch.optim.Optimizer", optimizer), clip, self.steps, read)
        if self.paused:
            self._hold()

    def hand_over(self, source: ModelSource) -> None:
        """An optimizer took over a hand-updated model whose one boundary in this run was
        this step's backward pass (step_boundary.py): its target goes, and the
        optimizer's step that follows is the same step, not the next."""
        try:
            with self._lock:
                if self.lr.forget(source) and self.steps > 0:
                    self.steps -= 1
        except Exception:
            self._ext.count_error("control")

    def _hold_run(self, held: bool) -> None:
        runs = self._runs()
        if runs is not None:
            runs.hold(held)

    def _hold(self) -> None:
        with self._lock:
            if self._step_once:  # a Step arrived before we got here: let this one through
                self._step_once = False
                return
            self.paused_at = self.steps
        self._hold_run(True)
        self._ext.stream.flush()
        self.broadcast()
        while True:
            self._wake.wait(0.1)
            self._serve_held()
            with self._lock:
                self._wake.clear()
                if not self.paused:
                    self.paused_at = None
                    break
                if self._step_once:
                    self._step_once = False
                    break
        self._hold_run(False)
        self.broadcast()

    def _serve_held(self) -> None:
        for serve in self.serve_while_held:
            try:
                serve()
            except Exception:
                self._ext.count_error("control:held")

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

    def _name_of(self, optimizer: torch.optim.Optimizer | ModelSource) -> str:
        if isinstance(optimizer, ModelSource):
            return f"{optimizer.name} (end of backward)"
        ns: dict[str, object] = getattr(self._ext.shell, "user_ns", {}) or {}
        return name_of(optimizer, ns)


def _number(args: dict[str, object], key: str) -> float:
    """A numeric argument its validator checked (``schema_number``)."""
    value = args[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ActionError(f"{key} must be a number")
    return value
