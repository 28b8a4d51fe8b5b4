"""Replay a non-finite step under anomaly detection, on the pre-step weights, on one click.

Anomaly mode (``torch.autograd.detect_anomaly``) names the backward op that made a NaN and
the forward line that created it, but costs 1.5-5x on every step: nobody leaves it on.
So the monitor keeps, at the bad step, what it takes to run that step again later: the
batch (``BadStep.calls``, references the loop holds anyway, R25) and a host copy of the
roots' weights and buffers *before* the optimizer applies the non-finite gradient
(``capture``, on the training thread, inside the optimizer pre-hook). The ``replay_step``
action then runs forward + backward of that batch once, with anomaly mode on, on a
functional copy of the model (replay_run.py), on a copy of the batch: the user's
parameters, ``.grad``, BatchNorm statistics, the model's attributes and the RNG states are
left exactly as they were (rerun.py, R53).

Threads (R34): a forward + backward of the model while the training thread is inside its
own would race it (a segfault, not an exception). So ``run`` runs on the calling thread
only when no cell runs elsewhere; while a cell trains, the replay is queued and the
training thread runs it at its next step boundary (``run_pending`` from
``GradMonitor.on_step``) or at the cell's end, and the action waits for it (bounded).

Capture is bounded: one capture (the newest bad step) and at most ``MAX_SNAPSHOT_BYTES``
of weights; a bigger model is replayed on its current weights, and the result says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...protocol import jsonable
from ..action_registry import ActionError
from ..safe_point import SafePointJobs
from .alerts import Alert

if TYPE_CHECKING:
    from torch import Tensor

    from ..host import Host
    from .alerts import AlertLog
    from .bad_step import BadStep

#: The most bytes of weights and buffers copied to the host at a bad step (all roots).
MAX_SNAPSHOT_BYTES = 512 * 2**20
#: How long the action waits for the training cell's next step boundary.
REPLAY_TIMEOUT_S = 30.0

REMEDY = {
    "backward": "The backward of that op divides by zero or overflows at these values "
    "(sqrt or norm at 0, pow with a negative exponent, a custom autograd Function): add an "
    "epsilon in the forward line shown (torch.sqrt(x + 1e-12), x.clamp_min(eps)).",
    "forward": "That forward line produces NaN/Inf from finite values (log of 0, division "
    "by zero, exp overflow): clamp its input or add an epsilon there.",
    "input": "The kept batch itself holds NaN/Inf: check the data pipeline.",
    "overflow": "Clip gradients (torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)) "
    "or lower the learning rate: the gradients grew past the float32 range.",
    "finite": "Nothing non-finite on replay of your loss: the NaN depended on something the "
    "replay does not repeat (see the result); if it recurs, run the loop with "
    "torch.autograd.set_detect_anomaly(True) around that step.",
    # The replay did not run the user's loss (an expression outside the model): it
    # cannot say whether the NaN reproduces.
    "unchecked": "The replay could not run your loss. Look at it for log(0) or a division "
    "by zero (log_softmax / F.cross_entropy on logits instead of log(softmax), clamp "
    "probabilities). To let the replay run it, compute it in a loss module "
    "(criterion = MyLoss(); loss = criterion(out, y)) or return it from the model (.loss).",
}


@dataclass
class ReplayAlert(Alert):
    """A ``non_finite_replay`` alert: the alert list shows the full result from it."""

    replay: dict[str, object] | None = None


class Replayer:
    """The newest bad step's capture, and the ``replay_step`` action's work."""

    def __init__(
        self,
        host: Host,
        alerts: AlertLog | None = None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.host = host
        self.alerts = alerts
        #: Called when availability changes (the ``grads`` status carries it).
        self.on_change = on_change
        self._lock = threading.Lock()
        self._bad: BadStep | None = None
        #: Root name -> {parameter or buffer name -> host copy}; None: too big / failed.
        self._snapshot: dict[str, dict[str, Tensor]] | None = None
        self._jobs = SafePointJobs()
        #: A replay running now (a second click is refused, not queued twice).
        self._busy = False
        self._closed = False
        #: Turns the keeping of forward calls off (True) / on (False) around a replay, so
        #: the replay's own forward is not kept as the model's last call (nonfinite.py).
        self.pause_keeping: Callable[[bool], None] = lambda paused: None
        #: (track, step) of the newest non-finite step whose batch was not kept.
        self._not_kept: tuple[str, int, bool] | None = None

    # --- training thread --------------------------------------------------------------

    def capture(self, bad: BadStep) -> None:
        """At the bad step, before the weights change: keep it and copy the weights."""
        try:
            snapshot = _snapshot(bad)
        except Exception:
            self.host.count_error("grads:replay_capture")
            snapshot = None
        with self._lock:
            self._bad, self._snapshot = bad, snapshot
            self._not_kept = None
        self.on_change()

    def not_kept(self, track: str, step: int, first: bool = True) -> None:
        """A non-finite step was caught but its batch was not kept (nothing to replay);
        ``first``: the model was first seen at that step (else its hooks never ran)."""
        with self._lock:
            self._not_kept = (track, step, first)

    def run_pending(self) -> None:
        """At a step boundary or the cell's end (training thread): a queued replay."""
        if self._jobs.waiting:
            self._jobs.run()

    # --- the action ------------------------------------------------------------------

    def available(self) -> dict[str, object] | None:
        """``{track, step}`` of the capture a replay would use (the ``grads`` status)."""
        bad = self._bad
        return None if bad is None else {"track": bad.track, "step": bad.step}

    def run(self, track: str | None) -> dict[str, object]:
        """Replay the captured step (of ``track``, when given); the action's result."""
        with self._lock:
            bad, snapshot = self._bad, self._snapshot
            if bad is None and self._not_kept is not None:
                name, step, first = self._not_kept
                why = (
                    "came before its batch could be kept (the model was first seen at that "
                    "step); the next non-finite step is kept"
                    if first
                    else "has no kept batch: the model's forward hooks did not run (call "
                    "model(x), not model.forward(x))"
                )
                raise ActionError(
                    f"nothing to replay: the non-finite step {step} of {name} {why}",
                    "refused",
                )
            if bad is None:
                raise ActionError(
                    "nothing to replay: no non-finite gradient step was caught since the "
                    "extension loaded (or the alerts were cleared)",
                    "refused",
                )
            if track is not None and track != bad.track:
                raise ActionError(
                    f"no bad step of {track!r} is kept; the kept one is of {bad.track!r}",
                    "refused",
                )
            if self._busy:
                raise ActionError("a replay is already running", "refused")
            self._busy = True
        try:
            if self.host.others_running():
                result = self._jobs.run_at_next(
                    lambda: self._replay(bad, snapshot), REPLAY_TIMEOUT_S
                )
            else:
                result = self._replay(bad, snapshot)
        finally:
            with self._lock:
                self._busy = False
        self._alert(bad, result)
        return result

    def _replay(
        self, bad: BadStep, snapshot: dict[str, dict[str, Tensor]] | None
    ) -> dict[str, object]:
        from .replay_run import replay

        if self._closed:
            raise ActionError("the extension was unloaded before the replay ran", "refused")
        try:
            self.pause_keeping(True)
            ns = getattr(getattr(self.host, "shell", None), "user_ns", None)
            return replay(bad, snapshot, ns if isinstance(ns, dict) else None)
        except ActionError:
            raise
        except Exception as e:  # the user's model raised on replay: say so, do not crash
            self.host.count_error("grads:replay")
            raise ActionError(
                f"the replay failed: {type(e).__name__}: {e}"[:500], "refused"
            ) from None
        finally:
            self.pause_keeping(False)

    def _alert(self, bad: BadStep, result: dict[str, object]) -> None:
        """Keep the result in the alert list (it outlives the panel's busy state)."""
        log = self.alerts
        if log is None:
            return
        try:
            cause = str(result.get("cause") or "finite")
            if cause == "finite" and result.get("reproduces") is None:
                cause = "unchecked"
            log.add(
                [
                    ReplayAlert(
                        kind="non_finite_replay",
                        severity="warning" if result.get("finite") else "error",
                        step=bad.step,
                        layer=_str_or_none(result.get("backward_op") or result.get("output")),
                        message=str(result.get("message", "")),
                        remedy=REMEDY.get(cause, REMEDY["finite"]),
                        track=bad.track,
                        replay=result,
                    )
                ]
            )
            out = log.take(force=True)
            if out:
                self.host.hub.broadcast(
                    jsonable({"method": "alert", "alerts": [a.to_json() for a in out]})
                )
        except Exception:
            self.host.count_error("grads:replay_alert")

    # --- lifecycle -------------------------------------------------------------------

    def clear(self) -> None:
        """Drop the capture (``clear_alerts``): the batch and weights are released."""
        with self._lock:
            had = self._bad is not None
            self._bad, self._snapshot = None, None
            self._not_kept = None
        if had:
            self.on_change()

    def close(self) -> None:
        """On unload: drop everything; a waiting replay is answered (refused) now."""
        with self._lock:
            self._bad, self._snapshot = None, None
            self._not_kept = None
            self._closed = True
        self._jobs.run()  # each refuses at once: it touches no tensor


def _str_or_none(v: object) -> str | None:
    return None if v is None else str(v)


def _snapshot(bad: BadStep) -> dict[str, dict[str, Tensor]] | None:
    """Host copies of each root's parameters and buffers, or None beyond the bound."""
    from .replay_run import eager

    roots = []
    total = 0
    for name, ref in bad.roots:
        root = ref()
        if root is None or name not in bad.calls:
            continue
        module = eager(root)
        tensors = [*module.named_parameters(), *module.named_buffers()]
        total += sum(t.numel() * t.element_size() for _, t in tensors)
        if total > MAX_SNAPSHOT_BYTES:
            return None
        roots.append((name, tensors))
    return {
        name: {k: t.detach().to("cpu", copy=True) for k, t in tensors} for name, tensors in roots
    }
