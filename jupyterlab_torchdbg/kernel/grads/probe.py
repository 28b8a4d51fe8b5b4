"""Forward probe: which module's forward turns finite values into NaN/Inf.

The gradient norms say which layer's *gradient* went non-finite; when the cause is in the
forward pass (``log(0)``, a division by zero, an overflow) the module that produced the
first NaN/Inf *output* is the answer the user wants. A forward hook on every submodule
(``with_kwargs=True``: ``self.head(feats=h)`` counts ``h`` as an input) checks its inputs
and its output:

- The first module (in completion order, so the innermost first) whose output is
  non-finite while its inputs were finite is named. A parent whose children are fine but
  whose own forward makes the NaN (``self.child(x) / 0``) is named, not the child. If its
  own parameters are already non-finite, the weights, not the computation, carry the NaN.
- Every output finite: the NaN/Inf arises in the loss or in backward.

Two ways to run it:

- ``run`` (the at-step diagnosis, diagnose.py): at the bad step, before the optimizer
  touched the weights, a copy of the kept batch (inputs.py) is run through the roots
  once more, under ``torch.no_grad()``, with everything the run may change (the modules'
  attributes and tensors, BatchNorm's statistics, the RNGs) saved and restored
  (rerun.py, R53), so the training run is not disturbed; every hook is removed right
  after. Only roots whose forward is torch's own run without a click (diagnose.py). A
  compiled root is run through its eager ``_orig_mod`` (the compiled graph is neither
  traced again nor given hooks).
- ``arm`` / ``report`` (the fallback when the step could not be checked: on CUDA without
  ``skip_nonfinite``, R26): armed after the flush-time alarm, it watches the *next*
  forward pass of the roots and reports at the next optimizer step — the weights may
  already hold the non-finite update by then, and the message says so.

Cost: one forward pass with one ``isfinite`` reduction per module output (on CUDA each is
a sync) once per non-finite alarm; nothing otherwise. Forward hooks only (never full
backward hooks), so ``inplace=True`` activations keep working (R27); the armed probe
leaves ``torch.compile``d models and ScriptModules alone (R28, R29). Hooks may fire on
DataParallel replica threads (R34): the probe's state is behind a lock. Holds modules by
handle only, and the roots' outputs only until the diagnosis is done. Its hooks are
switched by module_hooks.py (R41): the armed probe's when no thread is in a module call,
``run``'s at once (the training thread's own roots, at its step); both no-ops once
removed, out of torch's dicts when safe.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from ..module_hooks import POST, PRE, HookFn, HookSet, ModuleHook
from .alerts import Alert

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module

    from .bad_step import KeptCall

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


def _tensors(value: object, depth: int = 0) -> Iterator[Tensor]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 3 and isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v, depth + 1)


def finite(value: object) -> bool:
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


def dropout_active(modules: Iterable[Module]) -> bool:
    """Some dropout module under ``modules`` is in training mode with p > 0 (a re-run of
    their forward draws other masks than the step did)."""
    from torch.nn.modules.dropout import _DropoutNd

    for root in modules:
        for i, m in enumerate(root.modules()):
            if i >= MAX_MODULES:
                break
            if isinstance(m, _DropoutNd) and m.training and m.p > 0:
                return True
    return False


def params_finite(module: Module, recurse: bool = False) -> bool:
    try:
        return all(finite(p) for p in module.parameters(recurse=recurse))
    except Exception:
        return True


def probe_roots(roots: list[tuple[str, weakref.ref[Module]]]) -> list[tuple[str, Module]]:
    """The (name, module) roots the armed probe may hook: not compiled, not scripted."""
    import torch

    out = []
    for name, ref in roots:
        m = ref()
        if m is None or isinstance(m, torch.jit.ScriptModule) or hasattr(m, "_orig_mod"):
            continue
        out.append((name, m))
    return out


def eager_root(module: Module) -> Module | None:
    """The module to run a kept call through at once: a compiled model's eager original,
    None for ScriptModules."""
    import torch

    inner = getattr(module, "_orig_mod", None)
    if isinstance(inner, torch.nn.Module):
        module = inner
    return None if isinstance(module, torch.jit.ScriptModule) else module


class ForwardProbe:
    """Forward hooks on every submodule of the roots, for one forward pass."""

    def __init__(
        self, track: str, step: int, roots: list[tuple[str, Module]], now: bool = False
    ) -> None:
        from .naming import clean_param_name

        self.track = track
        self.armed_at = step
        self._lock = threading.Lock()
        #: Switched when no thread is in a module call (module_hooks.py, R41); ``now``
        #: (``run`` at the step, on the training thread's own roots): at once.
        self._hooks = HookSet(lambda site: None, "grads:probe", None)
        self._handles: list[ModuleHook] = []
        self.ran = False
        self.input_bad: str | None = None
        self.origin: tuple[str, bool] | None = None  # (module name, its weights finite)
        self.last_bad: str | None = None
        self.out_max: float | None = None  # largest |value| of the models' outputs
        #: The roots' outputs of ``run`` (for the loss check), dropped by ``remove``.
        self.outputs: list[object] = []
        self._keep_outputs = False
        self._roots: list[tuple[str, Module]] = roots
        #: Modules whose outputs are checked; ``complete``: every module of the roots.
        self.hooked = 0
        self.complete = True
        #: What ``run`` changed and could not put back (rerun.py).
        self.left: list[str] = []
        specs: list[tuple[Module, str, HookFn, bool]] = []
        for prefix, root in roots:
            specs.append((root, PRE, self._pre(prefix), False))
            for i, (name, mod) in enumerate(root.named_modules()):
                if i >= MAX_MODULES:
                    self.complete = False
                    break
                self.hooked += 1
                clean = clean_param_name(root, f"{name}.x").rpartition(".")[0] if name else ""
                full = f"{prefix}.{clean}" if clean else prefix
                specs.append((mod, POST, self._post(full, mod is root), True))
        self._handles = self._hooks.add(specs, now)

    def run(self, calls: list[KeptCall | None], spaces: Sequence[dict[str, object]] = ()) -> None:
        """Run each root once on a copy of its kept call (aligned with the roots), at
        once, without autograd; everything the run may change is put back afterwards
        (rerun.py, R53: the modules' attributes and tensors, the RNGs, the namespaces
        ``spaces``); then remove every hook."""
        import torch

        from .rerun import copied_call, restored

        self._keep_outputs = True
        self.input_bad = "-"  # the caller checked the inputs itself (diagnose.py)
        try:
            with torch.no_grad(), restored([m for _, m in self._roots], spaces) as saved:
                for (_, root), call in zip(self._roots, calls, strict=True):
                    if call is not None:
                        kept = copied_call(call)
                        root(*kept.args, **kept.kwargs)
                        del kept
            self.left = saved.left
        finally:
            self.input_bad = None
            self._remove_hooks()

    def _pre(self, name: str) -> Callable[[Module, tuple[object, ...]], None]:
        def hook(module: Module, args: tuple[object, ...]) -> None:
            try:
                if self.input_bad is None and not self.ran and not finite(args):
                    with self._lock:
                        self.input_bad = name
            except Exception:
                pass

        return hook

    def _post(
        self, name: str, is_root: bool
    ) -> Callable[[Module, tuple[object, ...], dict[str, object], object], None]:
        def hook(
            module: Module, args: tuple[object, ...], kwargs: dict[str, object], out: object
        ) -> None:
            try:
                if self.ran and not self._keep_outputs:
                    return
                if self.origin is None and not finite(out):
                    if finite(args) and finite(kwargs):
                        with self._lock:
                            if self.origin is None:
                                self.origin = (name, params_finite(module))
                    else:
                        with self._lock:
                            self.last_bad = name
                if is_root:
                    biggest = _abs_max(out)
                    with self._lock:
                        self.ran = True
                        if self._keep_outputs:
                            self.outputs.append(out)
                        if biggest is not None:
                            self.out_max = max(self.out_max or 0.0, biggest)
            except Exception:
                pass

        return hook

    def _remove_hooks(self) -> None:
        """Every hook a no-op now, out of torch's dicts when safe (idempotent)."""
        self._handles = []
        try:
            self._hooks.close()
        except Exception:
            pass

    def remove(self) -> None:
        """Remove every hook and drop what was kept."""
        self._remove_hooks()
        self.outputs = []
        self._roots = []

    def report(self, step: int) -> Alert | None:
        """The armed probe's finding after one forward pass (None if no forward ran),
        hooks removed. The weights may already hold the bad step's update."""
        self.remove()
        if not self.ran:
            return None
        at = f"in the forward pass of step {step}"
        late = (
            f" (checked at the first forward after the alarm of step {self.armed_at}: the "
            "step could not be checked before the optimizer ran, so the weights may already "
            "be updated)"
        )
        if self.input_bad is not None:
            msg = f"Forward probe: the input batch of {self.input_bad} contains NaN/Inf {at}."
            return self._alert(step, self.input_bad, msg + late, "input")
        if self.origin is not None:
            name, weights_ok = self.origin
            if weights_ok:
                msg = (
                    f"Forward probe: {name} turns finite inputs into NaN/Inf {at}: the "
                    "non-finite values start there."
                )
                return self._alert(step, name, msg + late, "origin")
            msg = (
                f"Forward probe: {name}'s own parameters are NaN/Inf {at} (the first such "
                "module in forward order): the optimizer has already applied a non-finite "
                "gradient."
            )
            return self._alert(step, name, msg + late, "weights")
        size = "" if self.out_max is None else f" (largest output {self.out_max:.3g})"
        msg = (
            f"Forward probe: every module output was finite {at}{size}; the NaN/Inf arises "
            "in the loss or in backward."
        )
        return self._alert(step, None, msg + late, "backward")

    def _alert(self, step: int, layer: str | None, msg: str, why: str) -> Alert:
        severity = "warning" if why == "backward" else "error"
        return Alert("non_finite_forward", severity, step, layer, msg, REMEDY[why], self.track)
