"""The ``measure_activations`` action and the ``memory.activations`` report.

``arm()`` puts a ``SavedBytes`` measurement (measure.py) on the models the memory panel
finds (the namespace's top-level models with trainable parameters, and the watched ones;
compiled and scripted models are left alone). Then:

- a cell trains: the next grad-enabled forward of one of them is measured on the
  training thread; the ack says ``armed`` and the report follows in a ``memory`` status;
- no cell runs: the last forward call the gradient monitor kept (grads/inputs.py) is
  re-run once, under the R53 rules (grads/rerun.py): only when the model's forward is
  torch's own (or watched with ``rerun_forward=True``), on a copy of the batch, with its
  state and every RNG put back, with grad enabled and no backward (nothing reaches
  ``.grad``). Otherwise the measurement stays armed for the next training step and the
  report says why;
- a CUDA out-of-memory error arms one (``after_oom``): the next attempt is measured.

The report is kept as plain JSON (``report``), sent in ``memory.activations``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .estimate import report_fields
from .measure import Saved, SavedBytes

if TYPE_CHECKING:
    from torch.nn import Module

    from ...host import Host
    from ..breakdown import Found


class MemoryMonitor(Protocol):
    """What the meter uses of ``monitor.MemoryMonitor`` (no import: it owns the meter)."""

    ext: Host
    _sent_key: str | None

    @property
    def in_cell(self) -> bool: ...

    def _wall(self) -> float: ...

    def found(self) -> Found: ...

    def publish(self, immediate: bool = False) -> None: ...


RerunForward = Callable[[object, list[tuple[str, "Module"]], bool, Callable[[], bool]], str | None]

NEXT_STEP = "measured at the next training step"
NO_MODEL = (
    "no model to measure: no nn.Module with trainable parameters in the notebook's "
    "namespace (or watch() one)"
)


class ActivationMeter:
    def __init__(self, monitor: MemoryMonitor) -> None:
        self.mon = monitor
        self.report: dict[str, object] | None = None
        self._lock = threading.Lock()
        self._m: SavedBytes | None = None
        #: Re-runs a root's last kept forward call (namespace, roots, hooks ready, seen?):
        #: the gradient monitor's, wired by ``extension.py``; None without it.
        self.rerun_forward: RerunForward | None = None

    # --- the action (any thread) -------------------------------------------------------------

    def action(self, args: dict[str, object]) -> dict[str, object]:
        self.arm(rerun=True)
        return {"state": (self.report or {}).get("state", "failed")}

    def after_oom(self) -> None:
        """After a CUDA OOM: measure the next attempt (never a re-run: it would fail again)."""
        self.arm(rerun=False, why="armed after the out-of-memory error")

    def arm(self, rerun: bool = True, why: str | None = None) -> None:
        roots, skipped = self._roots()
        if not roots:
            self._set("failed", text=skipped or NO_MODEL)
            self._publish()
            return
        with self._lock:
            old, self._m = self._m, None
        if old is not None:
            old.cancel()
        m = SavedBytes(roots, self._done, self.mon.ext.count_error)
        with self._lock:
            self._m = m
        names = ", ".join(n for n, _ in roots)
        text = f"{why or 'armed'}: {NEXT_STEP} ({names})"
        self._set("armed", text=text)
        if rerun and not self.mon.in_cell:
            not_now = self._rerun(m, roots)
            if not_now is not None and not m.finished:
                self._set("armed", text=f"{NEXT_STEP} ({names}): {not_now}")
        self._publish()

    def cancel(self) -> None:
        """Unload: the armed measurement's hooks go."""
        with self._lock:
            m, self._m = self._m, None
        if m is not None:
            m.cancel()

    # --- finding the models ----------------------------------------------------------------

    def _roots(self) -> tuple[list[tuple[str, Module]], str | None]:
        torch = sys.modules.get("torch")
        if torch is None:
            return [], "torch is not imported in this kernel"
        out: list[tuple[str, Module]] = []
        skipped: list[str] = []
        for name, model in self.mon.found().models:
            if not any(p.requires_grad for p in model.parameters()):
                continue  # a loss module, a frozen model: saves nothing worth measuring
            if hasattr(model, "_orig_mod") or isinstance(model, torch.jit.ScriptModule):
                skipped.append(name)
                continue
            out.append((name, model))
        why = None
        if skipped and not out:
            why = (
                f"not measured: {', '.join(skipped)} is compiled or scripted (hooks would break it)"
            )
        return out, why

    # --- the idle re-run (R53) ---------------------------------------------------------------

    def _rerun(self, m: SavedBytes, roots: list[tuple[str, Module]]) -> str | None:
        """Re-run the last kept forward now; None when it ran, else why not."""
        rerun = self.rerun_forward
        if rerun is None:
            return "the gradient monitor is not loaded"
        ns = getattr(self.mon.ext.shell, "user_ns", None)
        return rerun(ns, roots, m.ready, lambda: m.finished)

    # --- the report ----------------------------------------------------------------------

    def _done(self, saved: Saved) -> None:
        """The measured forward ended (training thread, or the idle re-run)."""
        with self._lock:
            if self._m is not None and self._m.result is saved:
                self._m = None
        if saved.failed == "cancelled":
            return
        if saved.failed is not None:
            self._set("failed", device=saved.device, batch=saved.batch, text=saved.failed)
        else:
            self._set("done", **report_fields(saved))
        self._publish()

    def _set(self, state: str, **fields: object) -> None:
        run = self.mon.ext.runs.current
        report: dict[str, object] = {
            "state": state,
            "time": round(self.mon._wall(), 3),
            "device": None,
            "run": getattr(run, "id", None),
            "step": getattr(run, "steps", None),
            "batch": None,
            "total": None,
            "per_sample": None,
            "modules": [],
            "free": None,
            "limit_source": None,
            "fits": None,
            "text": "",
        }
        report.update(fields)
        self.report = report

    def _publish(self) -> None:
        try:
            self.mon._sent_key = None
            self.mon.publish(immediate=True)
        except Exception:
            self.mon.ext.count_error("memory:activations")
