"""Forward probe: after a non-finite gradient alarm, find where the forward pass breaks.

The gradient norms say which layer's *gradient* went non-finite first; when the cause is
in the forward pass (``log(0)``, a division by zero, an overflow) the module that produced
the first NaN/Inf *output* is the answer the user wants. So once a non-finite alarm fires,
the monitor arms this probe for one forward pass of the models it names the parameters
through: a forward hook on every submodule checks its output, and a forward pre-hook on
each root checks the input batch. At the next optimizer step of that optimizer the probe
reports what it saw, as an alert, and removes every hook.

- The first module (in completion order, so the innermost first) whose output is
  non-finite while its inputs were finite is named. If its own parameters are already
  non-finite, the message says so: the optimizer has applied a non-finite gradient and
  the weights, not the computation, carry the NaN now.
- Every output finite: the NaN/Inf arises in the loss or in backward.
- The input batch non-finite: the data is the source.

Cost: one forward pass with one ``isfinite`` reduction per module output (on CUDA each is
a sync) once per non-finite alarm; nothing otherwise. Forward hooks only (never full
backward hooks), so ``inplace=True`` activations keep working (R27); ``torch.compile``d
models and ScriptModules are left alone (R28, R29). Hooks may fire on DataParallel
replica threads (R34): the probe's state is behind a lock. Holds modules by handle only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .alerts import Alert

if TYPE_CHECKING:
    from torch.nn import Module
    from torch.utils.hooks import RemovableHandle

#: Modules hooked per root at most (a huge model is probed at its first levels only).
MAX_MODULES = 4096

REMEDY = {
    "origin": "Look at that module's forward for log/sqrt/division of values that can reach "
    "0 or below, an exp or a pow that overflows, or an fp16 overflow; lowering the learning "
    "rate or clipping keeps the weights from driving it there.",
    "weights": "The weights are already NaN/Inf: restore a checkpoint (or re-initialise), "
    "then lower the learning rate or clip gradients before training on.",
    "backward": "If the outputs are huge, the loss on them overflows: lower the learning "
    "rate or clip gradients. Otherwise look for a backward that divides by zero (sqrt or "
    "norm at 0, a custom autograd Function), or an overflow in fp16.",
    "input": "The input batch contains NaN/Inf: check the data pipeline "
    "(torch.isfinite(batch).all()), missing values and normalisation by a zero std.",
}


def _tensors(value: object, depth: int = 0) -> Iterable[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 3 and isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v, depth + 1)


def _finite(value: object) -> bool:
    """True when every floating tensor in ``value`` is finite (metadata-safe)."""
    import torch

    for t in _tensors(value):
        try:
            if t.layout != torch.strided or t.device.type == "meta":
                continue  # sparse / meta: not evidence either way
            if not (t.is_floating_point() or t.is_complex()):
                continue
            if not bool(torch.isfinite(t.detach()).all()):
                return False
        except Exception:
            continue  # a subclass whose attributes raise: not evidence either way
    return True


def _abs_max(value: object) -> float | None:
    """The largest finite |value| among the floating tensors of ``value`` (None if none)."""
    import torch

    out: float | None = None
    for t in _tensors(value):
        try:
            if t.layout != torch.strided or t.device.type == "meta" or not t.is_floating_point():
                continue
            if t.numel():
                v = float(t.detach().abs().amax())
                out = v if out is None else max(out, v)
        except Exception:
            continue
    return out


def _params_finite(module: Module) -> bool:
    try:
        return all(_finite(p) for p in module.parameters(recurse=False))
    except Exception:
        return True


def probe_roots(roots: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The (name, module) roots that can be probed: not compiled, not scripted."""
    import torch

    out = []
    for name, ref in roots:
        m = ref()
        if m is None or isinstance(m, torch.jit.ScriptModule) or hasattr(m, "_orig_mod"):
            continue
        out.append((name, m))
    return out


class ForwardProbe:
    """One armed probe for one optimizer track (created by the monitor after an alarm)."""

    def __init__(self, track: str, step: int, roots: list[tuple[str, Any]]) -> None:
        from .naming import clean_param_name

        self.track = track
        self.armed_at = step
        self._lock = threading.Lock()
        self._handles: list[RemovableHandle] = []
        self.ran = False
        self.input_bad: str | None = None
        self.origin: tuple[str, bool] | None = None  # (module name, its weights finite)
        self.last_bad: str | None = None
        self.out_max: float | None = None  # largest |value| of the models' outputs
        self._roots: set[int] = set()
        for prefix, root in roots:
            self._roots.add(id(root))
            self._handles.append(root.register_forward_pre_hook(self._pre(prefix)))
            for i, (name, mod) in enumerate(root.named_modules()):
                if i >= MAX_MODULES:
                    break
                clean = clean_param_name(root, f"{name}.x").rpartition(".")[0] if name else ""
                full = f"{prefix}.{clean}" if clean else prefix
                self._handles.append(mod.register_forward_hook(self._post(full, mod is root)))

    def _pre(self, name: str) -> Callable[[Module, tuple[object, ...]], None]:
        def hook(module: Module, args: tuple[object, ...]) -> None:
            try:
                if self.input_bad is None and not self.ran and not _finite(args):
                    with self._lock:
                        self.input_bad = name
            except Exception:
                pass

        return hook

    def _post(
        self, name: str, is_root: bool
    ) -> Callable[[Module, tuple[object, ...], object], None]:
        def hook(module: Module, args: tuple[object, ...], output: object) -> None:
            try:
                if self.ran:
                    return
                if self.origin is None and not _finite(output):
                    if _finite(args):
                        with self._lock:
                            if self.origin is None:
                                self.origin = (name, _params_finite(module))
                    else:
                        with self._lock:
                            self.last_bad = name
                if is_root:
                    biggest = _abs_max(output)
                    with self._lock:
                        self.ran = True
                        if biggest is not None:
                            self.out_max = max(self.out_max or 0.0, biggest)
            except Exception:
                pass

        return hook

    def remove(self) -> None:
        handles, self._handles = self._handles, []
        for h in handles:
            try:
                h.remove()
            except Exception:
                pass

    def report(self, step: int) -> Alert | None:
        """The finding after one forward pass (None if no forward ran), hooks removed."""
        self.remove()
        if not self.ran:
            return None
        at = f"in the forward pass of step {step}"
        if self.input_bad is not None:
            msg = f"Forward probe: the input batch of {self.input_bad} contains NaN/Inf {at}."
            return self._alert(step, self.input_bad, msg, "input")
        if self.origin is not None:
            name, weights_ok = self.origin
            if weights_ok:
                msg = (
                    f"Forward probe: {name} turns finite inputs into NaN/Inf {at}: the "
                    "non-finite values start there."
                )
                return self._alert(step, name, msg, "origin")
            msg = (
                f"Forward probe: {name}'s own parameters are NaN/Inf {at} (the first such "
                "module in forward order): the optimizer has already applied a non-finite "
                "gradient."
            )
            return self._alert(step, name, msg, "weights")
        size = "" if self.out_max is None else f" (largest output {self.out_max:.3g})"
        msg = (
            f"Forward probe: every module output was finite {at}{size}; the NaN/Inf arises "
            "in the loss or in backward."
        )
        return self._alert(step, None, msg, "backward")

    def _alert(self, step: int, layer: str | None, msg: str, why: str) -> Alert:
        severity = "warning" if why == "backward" else "error"
        return Alert("non_finite_forward", severity, step, layer, msg, REMEDY[why], self.track)
