"""The replay itself: one forward + backward of a kept batch under anomaly detection.

Nothing of the user's model state is touched: the forward runs through
``torch.func.functional_call`` with fresh leaves (the pre-step snapshot on the
parameters' devices, or detached views of the current weights) and cloned buffers, so
``.grad``, the parameters and BatchNorm's running statistics stay as they were; the
backward is ``torch.autograd.grad`` (never ``.backward()`` into ``.grad``); the RNG
state is restored afterwards (``fork_rng``).

Backward starts from the user's loss when the replay can run it: what ``backward()`` was
called on at the bad step (``BadStep.root``, backward_root.py) when that is the model's own
loss or a loss module's output (or an expression of one: then from that term, and the
result says so). A loss computed outside the model by code the tool did not see
(``((out - y) ** 2).mean()``, ``F.mse_loss(out, y)``) cannot be re-run: backward then
starts from the sum of the model's outputs, and a finite result says plainly that
whether the NaN reproduces was not checked (``reproduces`` None), never that it does not.

What it finds, in order:

1. the kept batch or the weights (the parameters; buffers the batch's own forward
   updated are no evidence of an earlier update) already hold NaN/Inf;
2. the forward pass (or the loss) yields NaN/Inf: anomaly mode checks backward only, so a
   ``TorchFunctionMode`` checks each op's output during this one forward and names the
   first op that made NaN/Inf from finite arguments (a ``-inf`` mask passed as an
   argument is not blamed), with its Python stack;
3. backward: a post hook on every node of the graph names the first node whose gradient
   turned NaN/Inf from finite incoming gradients (anomaly mode's own check sees NaN
   only, so ``SqrtBackward0`` returning ``inf`` at 0 would be blamed on the op that
   later turned it into NaN); the forward stack is the node's anomaly-mode traceback.
   Anomaly mode's RuntimeError and warning are the fallback.

Stacks keep the user's frames (notebook cells, the user's and libraries' model code) and
drop torch's, the standard library's and this extension's, innermost last, bounded.
"""

from __future__ import annotations

import math
import re
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, TypeAlias

from ..action_registry import ActionError
from .probe import dropout_active
from .replay_loss import loss_root, relation
from .replay_report import Frame, report, user_frames
from .rerun import Saved, copied, copied_call, restored, user_code, user_globals

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from torch.nn import Module

    from .bad_step import BadStep, KeptCall, KeptLoss, KeptRoot

#: Graph nodes hooked at most (a bigger graph is watched on its first nodes only).
MAX_NODES = 200_000
#: Output tensors looked at at most (nested tuples / dicts of a model's output).
MAX_OUTPUTS = 256

#: A root's tensors by name (its host copies, the replay's state); the gradients at a node.
Params: TypeAlias = "dict[str, Tensor]"
GradsAt: TypeAlias = "tuple[Tensor | None, ...]"
_ANOMALY = re.compile(r"Function '(\w+)' returned nan values in its (\d+)\w* output")


def eager(module: Module) -> Module:
    """The plain module to replay: under a ``torch.compile`` wrapper (anomaly mode needs
    eager) and under (Distributed)DataParallel (whose forward runs collectives: one rank
    replaying alone would hang, and a replay is per process anyway)."""
    for _ in range(4):
        if type(module).__name__ in ("DistributedDataParallel", "DataParallel"):
            inner = getattr(module, "module", None)
        else:
            inner = getattr(module, "_orig_mod", None)
        if inner is None:
            break
        module = inner
    return module


def replay(
    bad: BadStep, snapshot: dict[str, Params] | None, ns: dict[str, object] | None = None
) -> dict[str, object]:
    """Replay each root's kept call; the first that reproduces a NaN/Inf is reported,
    else the one that ran the user's loss (else the first). Each runs on a copy of the
    batch and of the loss modules' targets, and what it may change is put back
    (rerun.py, R53; ``ns``: the notebook's namespace)."""
    done: list[dict[str, object]] = []
    losses = [replace(kl, rest=copied(kl.rest), kwargs=copied(kl.kwargs)) for kl in bad.losses]
    loss_modules = [m for kl in bad.losses if (m := kl.module()) is not None]
    for name, ref in bad.roots:
        root, call = ref(), bad.calls.get(name)
        if root is None or call is None:
            continue
        snap = snapshot.get(name) if snapshot is not None else None
        module = eager(root)
        ran = [module, *loss_modules]
        spaces = ([ns] if ns is not None else []) + user_globals(ran)
        with restored(ran, spaces) as saved:
            res = _replay_root(module, copied_call(call), losses, snap, name, bad.root)
        res = {
            "step": bad.step,
            "track": bad.track,
            "root": name,
            **res,
            "dropout": dropout_active([module]),
            "rerun": _rerun_words(name, bad.step, user_code(ran), saved),
        }
        if not res["finite"]:
            return _finish(res, bad)
        done.append(res)
    del losses
    if not done:
        raise ActionError(
            "nothing to replay: the model or its kept batch is gone (deleted or replaced)",
            "refused",
        )
    best = next((r for r in done if r["user_loss"] in ("same", "part")), done[0])
    return _finish(best, bad)


def _rerun_words(name: str, step: int, who: str | None, saved: Saved) -> str:
    """What the replay re-ran and what it put back (only what the code did)."""
    what = "the model's state, the notebook's names and collections" if who else "the model"
    out = (
        f" Re-ran {name} forward and backward once, on a copy of step {step}'s batch; "
        f"{what} and the RNGs ({', '.join(saved.rng_names)}) were put back."
    )
    if who is not None:
        out += f" Code in {who} ran once more: other side effects (files) are not undone."
    if saved.left:
        out += f" Changed and not put back: {', '.join(saved.left[:3])}."
    return out


def _finish(res: dict[str, object], bad: BadStep) -> dict[str, object]:
    """Whether the NaN reproduces (None: not checked) and the words (replay_report.py)."""
    if not res["finite"]:
        res["reproduces"] = True
    elif res["user_loss"] == "same":
        res["reproduces"] = False
    else:
        res["reproduces"] = None
    return report(res, bad.root)


def _replay_root(
    module: Module,
    call: KeptCall,
    losses: list[KeptLoss],
    snap: Params | None,
    name: str = "model",
    root: KeptRoot | None = None,
) -> dict[str, object]:
    import torch

    state, leaves, weights = _state(module, snap)
    out: dict[str, object] = {
        "weights": weights,
        "loss_root": None,
        "user_loss": relation(root, name, losses),
        "backward_op": None,
        "anomaly_op": None,
        "output": None,
        "forward_stack": [],
        "finite": False,
    }
    where = _first_nonfinite_in(call.args, "args") or _first_nonfinite_in(call.kwargs, "kwargs")
    if where is not None:
        return {**out, "cause": "input", "output": where}
    params = {k: v for k, v in state.items() if k in dict(module.named_parameters())}
    where = _first_nonfinite_in(params, "weights")
    if where is not None:
        return {**out, "cause": "weights", "output": where}
    out["bad_buffers"] = [
        k
        for k, v in state.items()
        if k not in params and isinstance(v, torch.Tensor) and not _finite(v)
    ][:8]
    devices = sorted({t.device.index or 0 for t in leaves if t.device.type == "cuda"})
    with (
        warnings.catch_warnings(record=True) as caught,
        torch.random.fork_rng(devices=devices, device_type="cuda"),
        torch.enable_grad(),
        torch.autograd.detect_anomaly(check_nan=True),
    ):
        warnings.simplefilter("always")
        watch = forward_watch()
        with watch:
            result = torch.func.functional_call(module, state, tuple(call.args), dict(call.kwargs))
            loss, out["loss_root"], out["user_loss"] = loss_root(
                result, [t for _, t in _outputs(result, "out")], losses, name, root
            )
        where = _first_nonfinite_in(result, "out")
        if where is None and loss is not None and not _finite(loss):
            where = "loss"
        if where is not None:
            op, stack = watch.origin or (None, [])
            return {
                **out,
                "cause": "forward",
                "output": where,
                "forward_op": op,
                "forward_stack": stack,
            }
        if loss is None or not loss.requires_grad or not leaves:
            return {**out, "finite": True, "cause": "finite", "no_graph": True}
        nodes = _BackwardWatch(loss)
        try:
            grads = torch.autograd.grad(loss, leaves, allow_unused=True)
        except RuntimeError as e:
            m = _ANOMALY.search(str(e))
            if m is None:
                raise
            out["anomaly_op"] = m.group(1)
            grads = ()
        finally:
            nodes.remove()
    if nodes.origin is not None:
        op, lines = nodes.origin
        return {
            **out,
            "cause": "backward",
            "backward_op": op,
            "forward_stack": user_frames(lines),
        }
    if out["anomaly_op"] is not None:
        text = "".join(
            str(w.message) for w in caught if "Traceback of forward call" in str(w.message)
        )
        return {
            **out,
            "cause": "backward",
            "backward_op": out["anomaly_op"],
            "forward_stack": user_frames([text]),
        }
    names = [k for k, v in state.items() if isinstance(v, torch.Tensor) and v.requires_grad]
    for k, g in zip(names, grads, strict=False):  # () when anomaly mode raised
        if g is not None and not _finite(g):
            return {**out, "cause": "backward", "output": f"grad of {k}"}
    for k, g in zip(names, grads, strict=False):
        # Finite values whose float32 norm overflows: what the monitor saw as non-finite.
        if g is not None and g.is_floating_point() and g.numel():
            if not math.isfinite(float(torch.linalg.vector_norm(g.detach().float()))):
                return {**out, "cause": "overflow", "output": f"grad of {k}"}
    return {**out, "finite": True, "cause": "finite"}


def _state(module: Module, snap: Params | None) -> tuple[Params, list[Tensor], str]:
    """Parameters (fresh leaves) and buffers (copies) for ``functional_call``."""
    state: Params = {}
    leaves: list[Tensor] = []
    pre_step = snap is not None
    for name, p in module.named_parameters():
        src = snap.get(name) if snap is not None else None
        if src is None or src.shape != p.shape:
            pre_step = False
            t = p.detach()  # a view: autograd.grad never writes it
        else:
            t = src.to(p.device, copy=True)
        t.requires_grad_(p.requires_grad)
        if t.requires_grad:
            leaves.append(t)
        state[name] = t
    for name, b in module.named_buffers():
        src = snap.get(name) if snap is not None else None
        if src is None or src.shape != b.shape:
            state[name] = b.detach().clone()  # BatchNorm updates its copy, not the user's
        else:
            state[name] = src.to(b.device, copy=True)
    return state, leaves, "pre-step" if pre_step else "current"


def _outputs(value: object, path: str, depth: int = 0) -> Iterator[tuple[str, Tensor]]:
    """(path, tensor) of a nested output: ``out[0]``, ``out['logits']``, ``batch.x``."""
    import torch

    if isinstance(value, torch.Tensor):
        yield path, value
    elif depth >= 4:
        return
    elif isinstance(value, dict):
        for k, v in list(value.items())[:MAX_OUTPUTS]:
            yield from _outputs(v, f"{path}[{k!r}]", depth + 1)
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value[:MAX_OUTPUTS]):
            yield from _outputs(v, f"{path}[{i}]", depth + 1)


def _first_nonfinite_in(value: object, path: str) -> str | None:
    for i, (where, t) in enumerate(_outputs(value, path)):
        if i >= MAX_OUTPUTS:
            break
        if not _finite(t):
            return where
    return None


def _finite(t: object) -> bool:
    """False only for a floating tensor holding NaN/Inf (other values: no evidence)."""
    import torch

    if not isinstance(t, torch.Tensor):
        return not (isinstance(t, float) and not math.isfinite(t))
    try:
        if t.layout != torch.strided or t.device.type == "meta" or t.numel() == 0:
            return True
        if not (t.is_floating_point() or t.is_complex()):
            return True
        return bool(torch.isfinite(t.detach()).all())
    except Exception:
        return True


def _all_finite(value: object, depth: int = 0) -> bool:
    if isinstance(value, (tuple, list)) and depth < 3:
        return all(_all_finite(v, depth + 1) for v in value)
    if isinstance(value, dict) and depth < 3:
        return all(_all_finite(v, depth + 1) for v in value.values())
    return _finite(value)


class _OpFinder(Protocol):  # the forward watch as used: a mode entered once, its finding
    origin: tuple[str, list[Frame]] | None

    def __enter__(self) -> object: ...
    def __exit__(self, exc_type: object, exc_val: object, exc_tb: object) -> None: ...


_watch_cls: Callable[[], _OpFinder] | None = None


def forward_watch() -> _OpFinder:
    """A ``TorchFunctionMode`` that names the first op making NaN/Inf from finite
    arguments, with its stack (the class is made on first use: no torch at import)."""
    global _watch_cls
    if _watch_cls is None:
        import torch
        from torch.overrides import TorchFunctionMode

        class ForwardWatch(TorchFunctionMode):
            def __init__(self) -> None:
                super().__init__()
                self.origin: tuple[str, list[Frame]] | None = None

            def __torch_function__(
                self,
                func: Callable[..., object],
                types: Iterable[type],
                args: Sequence[object] = (),
                kwargs: Mapping[str, object] | None = None,
            ) -> object:
                kwargs = kwargs or {}
                result = func(*args, **kwargs)
                if self.origin is None and isinstance(result, (torch.Tensor, tuple, list)):
                    try:
                        if not _all_finite(result) and _all_finite((args, kwargs)):
                            name = getattr(func, "__name__", None) or repr(func)
                            self.origin = (str(name), user_frames(traceback.format_stack()))
                    except Exception:
                        pass  # not evidence either way
                return result

        _watch_cls = ForwardWatch
    return _watch_cls()


class _BackwardWatch:
    """Post hooks on every node of ``loss``'s graph: the first to turn NaN/Inf."""

    def __init__(self, loss: Tensor) -> None:
        self.origin: tuple[str, list[str]] | None = None
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        seen: set[torch.autograd.graph.Node] = set()
        todo: list[torch.autograd.graph.Node | None] = [loss.grad_fn]
        while todo and len(seen) < MAX_NODES:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            self._handles.append(node.register_hook(self._hook(node)))
            todo.extend(n for n, _ in node.next_functions)

    def _hook(self, node: torch.autograd.graph.Node) -> Callable[[GradsAt, GradsAt], None]:
        def hook(grad_inputs: GradsAt, grad_outputs: GradsAt) -> None:
            if self.origin is None and not _all_finite(grad_inputs) and _all_finite(grad_outputs):
                meta = getattr(node, "metadata", {})
                lines = meta.get("traceback_", []) if isinstance(meta, dict) else []
                self.origin = (str(node.name()), [str(x) for x in lines])

        return hook

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
