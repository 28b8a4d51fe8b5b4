"""A rank's gradient signals, judged in its worker: non-finite (with the cause found from
this rank's own forward data), explosion and vanishing.

Under DDP the all-reduce averages every rank's gradients, so one rank's NaN is every
rank's: every rank reads NaN norms at that step. What differs between the ranks is their
own forward data. So each worker keeps the last forward call of its model, as the kernel
does for its own loops (kernel/grads/inputs.py's ``InputKeeper``, on the model the reader
found, its DDP wrapper unwrapped, and on the loss modules in the training frames), and at
the first non-finite sampled step (re-armed after ``REARM_SAMPLES`` finite ones) runs the
kernel's diagnosis on it (kernel/grads/diagnose.py: the batch, a forward re-run with the
pre-step weights, the loss, else backward). One core: nothing of it is copied here. The
finding rides on the step's row; the kernel (grad_alarms.py) compares the ranks' findings
at that step and names the rank where the NaN began.

Explosion and vanishing: the kernel's ``Detector`` (kernel/grads/alarms.py) on this
rank's sampled reads (total and per-layer norms, host floats), run by the agent's thread
when it sends rows (``judge``): new small CPU tensors, never a user tensor, never CUDA.

What it never does: a collective (the forward re-run calls the DDP wrapper's inner
module, never the wrapper, and is skipped, with the reason, when a SyncBatchNorm in
training mode, FSDP or DTensor parameters would need the other ranks: R35); a
host-device sync per step (the reader's values are on the host already; the diagnosis
syncs once per alarm, as the kernel's); raise into ``step()`` (failures are counted,
R11). The keeper holds the last batch by reference only (R25) and the model by weakref
(R24); ``remove`` drops every hook.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from ..wire.signals import CAUSES, SIGNAL_KINDS
from .reader import frame_namespace

if TYPE_CHECKING:
    import torch

    from ...kernel.grads.alarms import Detector
    from ...kernel.grads.bad_step import KeptCall
    from ...kernel.grads.inputs import InputKeeper
    from ..wire.messages import Finding, Signal
    from .reader import Read

#: Sampled reads waiting for the detector at most (the oldest dropped first).
MAX_PENDING = 4096
#: Seconds between two reads of the weights' norms after the first steps (the kernel's
#: periodic read of the same, grads/monitor.py).
WEIGHTS_EVERY_S = 1.0
#: Modules looked at for a layer that needs the other ranks.
MAX_MODULES = 4096


def inner_module(module: torch.nn.Module) -> torch.nn.Module:
    """The module a DDP / DataParallel wrapper runs (its forward needs no collective)."""
    cls = type(module).__name__
    if cls in ("DistributedDataParallel", "DataParallel"):
        inner: torch.nn.Module | None = getattr(module, "module", None)
        if inner is not None:
            return inner
    return module


def needs_other_ranks(module: torch.nn.Module) -> str | None:
    """Why a forward of ``module`` would wait for the other ranks (None: it would not)."""
    for i, m in enumerate(module.modules()):
        if i >= MAX_MODULES:
            break
        cls = type(m).__name__
        if cls == "SyncBatchNorm" and m.training:
            return "its SyncBatchNorm layers exchange statistics with the other ranks"
        if cls.startswith(("FullyShardedDataParallel", "FSDP")) or hasattr(
            m, "_fsdp_wrapped_module"
        ):
            return "FSDP gathers its parameters from the other ranks"
    for i, p in enumerate(module.parameters()):
        if i >= MAX_MODULES:
            break
        if type(p).__name__ == "DTensor" or type(getattr(p, "data", None)).__name__ == "DTensor":
            return "its parameters are DTensors sharded across the ranks"
    return None


class RankSignals:
    """The keeper of the last batch, the at-step diagnosis and the detector of one rank."""

    def __init__(self, on_error: Callable[[str], None]) -> None:
        self._on_error = on_error
        self.keeper: InputKeeper | None = None
        self._root: weakref.ref[torch.nn.Module] | None = None
        self._name = "model"
        self._armed = True
        self._calm = 0
        self._lock = threading.Lock()
        #: (step, [total, *layers]) sampled since the detector last looked.
        self._reads: list[tuple[int, list[float]]] = []
        self._names: list[str] | None = None
        self._layout = 0  # bumped when the layer names change: a fresh detector
        self._detector: Detector | None = None
        self._detector_layout = -1
        #: The last step the detector has judged.
        self.checked = 0
        #: (step, [total, *layers]) of the weights' norms since the detector last looked,
        #: the optimizer's largest lr, and when they were last read (``wants_weights``).
        self._weights: list[tuple[int, list[float]]] = []
        self._lr: float | None = None
        self._weights_at: float | None = None
        self._weight_reads = 0

    # --- the training thread ------------------------------------------------------------

    def watch(self, module: torch.nn.Module, name: str | None, frame: FrameType | None) -> None:
        """Keep the last forward call of ``module`` (unwrapped) and of the loss modules
        bound in the training frames. Never raises."""
        try:
            inner = inner_module(module)
            root = self._root() if self._root is not None else None
            if root is inner:
                return
            from ...kernel.grads.inputs import InputKeeper, hook_target
            from ...kernel.grads.loss_sources import loss_modules

            if self.keeper is None:
                self.keeper = InputKeeper(self._on_error)
            target = hook_target(inner, {})
            label = name or type(inner).__name__.lower()
            roots = [] if target is None else [(label, target)]
            self.keeper.sync(roots, loss_modules(frame_namespace(frame)))
            self._root = weakref.ref(inner)
            self._name = label
        except Exception:
            self._on_error("signals:watch")

    def at_read(self, step: int, read: Read, diagnose: bool = True) -> Finding | None:
        """A sampled read (before the optimizer applies this step): keep it for the
        detector; at the first non-finite one, the diagnosis of its cause (the row's
        ``nonfinite``; not with ``diagnose=False``: a read that reached the host after
        its step, whose batch is gone). Never raises."""
        try:
            if read.norm is None or read.layers is None or read.names is None:
                return None
            with self._lock:
                if read.names != self._names:
                    self._names = list(read.names)
                    self._layout += 1
                    self._reads = []
                self._reads.append((step, [read.norm, *read.layers]))
                if len(self._reads) > MAX_PENDING:
                    del self._reads[0]
            return self._non_finite(step, read) if diagnose else None
        except Exception:
            self._on_error("signals:read")
            return None

    def wants_weights(self, step: int, now: float) -> bool:
        """Whether to read the weights' norms at this sampled step: at each of the first
        steps (the first updates' size, kernel/grads/explosion.py), then about once a
        second (the scale a gradient norm is judged against), as the kernel does."""
        from ...kernel.grads.divergence import EARLY_UPDATES

        if self._weight_reads <= EARLY_UPDATES:
            return True
        return self._weights_at is None or now - self._weights_at >= WEIGHTS_EVERY_S

    def at_weights(self, step: int, now: float, row: list[float], lr: float | None) -> None:
        """The weights' norms read at ``step`` (training thread; host floats)."""
        with self._lock:
            self._weights.append((step, row))
            if len(self._weights) > MAX_PENDING:
                del self._weights[0]
            self._lr = lr
        self._weights_at = now
        self._weight_reads += 1

    def _non_finite(self, step: int, read: Read) -> Finding | None:
        from ...kernel.grads.alarms import REARM_SAMPLES

        assert read.norm is not None
        if math.isfinite(read.norm):
            self._calm += 1
            if not self._armed and self._calm >= REARM_SAMPLES:
                self._armed = True
            return None
        self._calm = 0
        if not self._armed:
            return None
        self._armed = False
        return self.diagnose(step, read)

    def diagnose(self, step: int, read: Read) -> Finding:
        """The kernel's at-step diagnosis on this rank's kept batch (kernel/grads/
        diagnose.py), without a collective: what made this step's gradient non-finite
        as far as this rank's own data shows."""
        import torch

        from ...kernel.grads import diagnose, rerun

        layers, names = read.layers or [], read.names or []
        bad = [i for i, v in enumerate(layers) if not math.isfinite(v)]
        grad_layer = names[bad[-1]] if bad and bad[-1] < len(names) else None
        out: Finding = {"cause": "unknown", "layer": grad_layer, "message": ""}
        keeper = self.keeper
        root = self._root() if self._root is not None else None
        call = keeper.call_of(root) if keeper is not None and root is not None else None
        if keeper is None or root is None or call is None:
            out["message"] = (
                "not diagnosed: no forward call of its model was kept before this step "
                "(the model is hooked at its first sampled step)"
            )
            return out
        roots: list[tuple[str, torch.nn.Module, KeptCall | None]] = [(self._name, root, call)]
        losses = keeper.losses()
        # what backward() was called on, read during this step's backward (the kernel's
        # backward_root.py), when it came after this batch's forward call
        backward_root = keeper.root
        if backward_root is not None and backward_root.call <= call.call:
            backward_root = None
        # the loss is checked only when it was read on this batch: the backward's own
        # root, or a loss module's output; else "finite" is not known of it (R47)
        out["loss_checked"] = backward_root is not None or any(
            k.output is not None and k.call > call.call for k in losses
        )
        keeper.paused = True
        try:
            finding = diagnose.overflow(
                read.params, torch.tensor(read.values, dtype=torch.float64), grad_layer
            )
            why_not = None
            if finding is None:
                ok = rerun.allowed()
                why_not = needs_other_ranks(root)
                if why_not is None and id(root) not in ok:
                    who = rerun.user_code([root])  # R53: not re-run without a click
                    why_not = None if who is None else f"code in {who} may have side effects"
                if why_not is None:
                    finding = diagnose.diagnose(
                        roots,
                        losses,
                        None,
                        grad_layer,
                        "rank",
                        step,
                        root=backward_root,
                        rerun_ok=ok,
                    )
                else:  # the batch only: the forward would wait for the other ranks
                    finding = diagnose.check_inputs(roots)
        finally:
            keeper.paused = False
        out["rerun"] = why_not is None
        if why_not is not None:
            out["why_not_rerun"] = why_not
        if finding is None:
            out["cause"] = "unknown"
            out["message"] = f"its batch is finite; the forward was not re-run: {why_not}"
            out["batch_finite"] = True
            return out
        out["cause"] = finding.cause if finding.cause in CAUSES else "unknown"
        out["layer"] = finding.layer
        out["message"] = finding.message
        out["batch_finite"] = finding.cause != "input"
        return out

    # --- the agent's thread -------------------------------------------------------------

    def judge(self, clipping: bool) -> list[Signal]:
        """The detector on the reads sampled since it last looked: explosion and
        vanishing alerts as plain dicts (step, layer, message, remedy, value). Host
        floats only. Never raises."""
        with self._lock:
            reads, self._reads = self._reads, []
            weights, self._weights = self._weights, []
            names, layout, lr = self._names, self._layout, self._lr
        if not reads or names is None:
            return []
        try:
            import torch

            from ...kernel.grads.alarms import Detector, Thresholds

            if self._detector is None or self._detector_layout != layout:
                self._detector = Detector("rank", Thresholds())
                self._detector_layout = layout
            width = 1 + len(names)
            rows = [r for _, r in reads if len(r) == width]
            steps = [float(s) for s, r in reads if len(r) == width]
            if not rows:
                return []
            wrows = [w for _, w in weights if len(w) == width]
            if wrows:  # the scale the norms are judged against, before the rows it judges
                wsteps = [float(s) for s, w in weights if len(w) == width]
                self._detector.observe_weights(wsteps, torch.tensor(wrows, dtype=torch.float64))
            m = torch.tensor(rows, dtype=torch.float32)
            alerts = self._detector.evaluate(steps, m, list(names), clipping=clipping, lr=lr)
            self.checked = int(steps[-1])
        except Exception:
            self._on_error("signals:judge")
            return []
        out: list[Signal] = []
        for a in alerts:
            if a.kind not in SIGNAL_KINDS:
                continue
            value = a.value if a.value is not None and math.isfinite(a.value) else None
            out.append(
                {
                    "kind": a.kind,
                    "step": int(a.step),
                    "layer": a.layer,
                    "message": a.message,
                    "remedy": a.remedy,
                    "value": value,
                }
            )
        return out

    def remove(self) -> None:
        """Every hook of the keeper goes; nothing is kept."""
        keeper, self.keeper = self.keeper, None
        self._root = None
        if keeper is not None:
            keeper.clear()
