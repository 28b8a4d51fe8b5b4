"""The tensor ``backward()`` was called on: the loss, whatever computed it (R47).

A loss is not always a loss module: ``((out - y) ** 2).mean()``, ``F.cross_entropy(out,
y)``, a custom ``nn.Module``, a model's ``outputs.loss``, ``outputs.loss / accum``. What
they share is that ``backward()`` is called on them. So the keeper learns the loss from the
backward pass itself, without patching ``Tensor.backward``:

- the root model's forward hook (inputs.py) registers a pre-hook on the ``grad_fn`` of
  its output (a node this forward just made: no other thread can be running it);
- when a backward pass reaches that node (once per pass: the graph task id), torch's
  ``_engine_run_backward`` frame is right above on the thread that called ``backward()``
  (a CPU graph runs there): its ``t_outputs`` are the tensors backward started from. On a
  device's thread (CUDA nodes) no Python frame is above; the pre-hook then queues an
  autograd engine callback, which runs once the whole backward has finished on the
  calling thread (the way DDP finds the end of backward) and reads the same frame. Only
  a ``torch.autograd.backward`` counts: ``torch.autograd.grad`` (a gradient penalty, the
  replay's own) accumulates nothing and is not the step's loss.

What is kept (``KeptRoot``): detached views of the roots of at most ``MAX_VALUES``
elements (a 0-d loss: a few bytes, never its graph), their shapes, a weak reference to
the first, and what it is: a root model's own loss or a loss module's output (that very
tensor, or an expression of it: ``ce(out, y) + nll(p, y)``), or an expression the tool did
not see made. Which is which is read from the graph itself: the keeper marks the autograd
node of each loss it sees made (``mark``: an entry in the node's ``metadata`` dict, which
dies with the node; no reference to a node or a tensor is kept), and the callback looks
for marks at the root and within ``MAX_WALK`` nodes under it (only when some loss was
marked since the last backward). The next backward replaces it; unload drops it.
When the callback finds no such frame (another engine entry, an older torch) nothing is
kept, and the diagnosis says the loss was not checked.

Cost per backward pass: one Python call inside backward (a frame lookup, a look at the
root node's metadata; on CUDA one engine callback more); a walk of at most ``MAX_WALK``
nodes only when the root is not itself a marked loss while some loss was marked
(measured in tests/test_grads_nan_cause.py: about 10 µs on CPU).
R11: nothing here raises into ``backward()``.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

from .bad_step import KeptRoot

if TYPE_CHECKING:
    from types import CodeType, FrameType

    from torch import Tensor
    from torch.autograd.graph import Node
    from torch.utils.hooks import RemovableHandle

#: Root elements kept as values (a per-sample loss vector; larger roots: shape only).
MAX_VALUES = 4096
#: Autograd nodes looked at to find a kept loss inside the root's expression.
MAX_WALK = 32
#: Root tensors looked at (``torch.autograd.backward([l1, l2])``).
MAX_ROOTS = 8

#: The key of the keeper's mark in an autograd node's ``metadata``: (kind, name).
MARK = "jupyterlab_torchdbg.loss"


class RootWatch:
    """Keeps what the last ``backward()`` was called on (``root``)."""

    def __init__(self, counter: Callable[[], int], on_error: Callable[[str], None]) -> None:
        self._counter = counter
        self._on_error = on_error
        self.root: KeptRoot | None = None
        #: Set on unload: a node pre-hook still on a live graph does nothing.
        self.closed = False
        #: While set (a probe or replay re-runs a forward), nothing is kept.
        self.paused = False
        self._task = -2
        self._bound = False
        self._task_id: Callable[[], int] = lambda: -1
        self._queue: Callable[[Callable[[], None]], None] = lambda fn: None
        self._run_code: CodeType | None = None
        self._backward_code: CodeType | None = None
        #: Losses marked since the last backward (no walk of the graph without one).
        self._marks = 0

    def _bind(self) -> bool:
        if self._bound:
            return True
        import torch
        from torch.autograd import graph

        task_id = getattr(torch._C, "_current_graph_task_id", None)
        engine = getattr(torch.autograd.Variable, "_execution_engine", None)
        queue = getattr(engine, "queue_callback", None)
        run = getattr(getattr(graph, "_engine_run_backward", None), "__code__", None)
        backward = getattr(torch.autograd.backward, "__code__", None)
        if task_id is None or queue is None or run is None or backward is None:
            return False  # another torch: the loss is not learned (and says so)
        self._task_id, self._queue = task_id, queue
        self._run_code, self._backward_code = run, backward
        self._bound = True
        return True

    # --- at the root model's forward (training thread) ---------------------------------

    def arm(self, tensor: Tensor) -> RemovableHandle | None:
        """A pre-hook on ``tensor``'s autograd node: the next backward through it tells
        its root. None when it has no node (no grad, a leaf) or torch lacks the means."""
        node = tensor.grad_fn
        if node is None or self.closed or not (self._bound or self._bind()):
            return None
        handle: RemovableHandle = node.register_prehook(self._on_node)
        return handle

    # --- inside backward (any thread: CUDA nodes run on the device's thread) ----------

    def _on_node(self, grad_outputs: tuple[Tensor | None, ...]) -> None:
        """Inside backward, once per pass: on the thread that called ``backward()`` (a
        CPU graph) the engine's frame is right above; on a device's thread (CUDA nodes)
        there is no Python frame above, and an engine callback reads it at the end."""
        try:
            if self.closed or self.paused:
                return
            task = self._task_id()
            if task == self._task:
                return
            self._task = task
            found, outputs = self._roots(1)
            if outputs is not None:
                self.root = self._keep(outputs)
            elif not found:
                self._queue(self._at_end)
        except Exception:  # R11: never into the user's backward
            self._on_error("grads:backward_root")

    def _at_end(self) -> None:
        """The backward pass has finished (the thread that called ``backward()``)."""
        try:
            if self.closed or self.paused:
                return
            _, outputs = self._roots(1)
            if outputs is not None:
                self.root = self._keep(outputs)
        except Exception:
            self._on_error("grads:backward_root")

    def _roots(self, depth: int) -> tuple[bool, list[Tensor] | None]:
        """(an engine frame is above, the ``t_outputs`` of that ``_engine_run_backward``
        frame when ``torch.autograd.backward`` called it — not ``autograd.grad``)."""
        import torch

        try:
            f: FrameType | None = sys._getframe(depth + 1)
        except ValueError:
            return False, None  # no Python frame above: a device's thread
        for _ in range(4):
            if f is None or f.f_code is self._run_code:
                break
            f = f.f_back
        if f is None or f.f_code is not self._run_code:
            return False, None
        caller = f.f_back
        if caller is None or caller.f_code is not self._backward_code:
            return True, None
        outputs = f.f_locals.get("t_outputs")
        if not isinstance(outputs, (tuple, list)):
            return True, None
        return True, [t for t in outputs[:MAX_ROOTS] if isinstance(t, torch.Tensor)]

    def _keep(self, roots: list[Tensor]) -> KeptRoot | None:
        if not roots:
            return None
        first = roots[0]
        if len(roots) == 1:  # the usual loss.backward(): no generator
            values: tuple[Tensor, ...] = (first.detach(),) if first.numel() <= MAX_VALUES else ()
            shapes: tuple[tuple[int, ...], ...] = (first.shape,)
        else:
            values = tuple(t.detach() for t in roots if t.numel() <= MAX_VALUES)
            shapes = tuple(t.shape for t in roots)  # torch.Size: a tuple
        terms, exact = self._terms(first) if self._marks else ([], False)
        self._marks = 0
        kind, source = terms[0] if terms else ("expression", None)
        node = first.grad_fn
        return KeptRoot(
            values,
            shapes,
            kind,
            source,
            exact,
            None if node is None else node.name(),
            self._counter(),
            weakref.ref(first),
            tuple(name for _, name in terms),
        )

    # --- which loss it is -------------------------------------------------------------

    def mark(self, tensor: Tensor, kind: str, name: str) -> None:
        """``tensor`` is a loss the keeper saw made (a root model's own loss, a loss
        module's output): its node carries the mark for as long as it lives."""
        node = tensor.grad_fn
        if node is not None:
            # torch's stub declares ``Node.metadata`` a method; it is a dict property
            meta = cast("dict[str, object]", node.metadata)
            meta[MARK] = (kind, name)
            self._marks += 1

    def _terms(self, root: Tensor) -> tuple[list[tuple[str, str]], bool]:
        """(the marked losses at or under the root, in graph order; the root is one)."""
        node = root.grad_fn
        if node is None or not self._marks:
            return [], False
        own = _mark_of(node)
        if own is not None:
            return [own], True
        found: list[tuple[str, str]] = []
        seen: set[int] = {id(node)}
        todo = [n for n, _ in node.next_functions]
        while todo and len(seen) < MAX_WALK:
            n = todo.pop(0)
            if n is None or id(n) in seen:
                continue
            seen.add(id(n))
            hit = _mark_of(n)
            if hit is not None:
                if hit not in found:
                    found.append(hit)
                continue  # a loss's own graph holds no further loss of this step
            todo.extend(m for m, _ in n.next_functions)
        return found, False

    def clear(self) -> None:
        self.root = None


def _mark_of(node: Node) -> tuple[str, str] | None:
    try:
        hit = cast("dict[str, object]", node.metadata).get(MARK)  # a property (see mark)
    except Exception:
        return None
    return hit if isinstance(hit, tuple) else None


def root_of(root: KeptRoot | None, after: int) -> KeptRoot | None:
    """``root`` if its backward came after the forward call numbered ``after``."""
    return root if root is not None and root.call > after else None


def describe(root: KeptRoot, ns: Mapping[str, object] | None = None) -> str:
    """The loss as messages name it: "`loss` (criterion(...))", "backward() was called
    on (computed outside the model, MeanBackward0)"."""
    name = _bound_name(root, ns)
    what = source_of(root)
    return f"`{name}` ({what})" if name else f"backward() was called on ({what})"


def source_of(root: KeptRoot) -> str:
    """What computed the root: "criterion(...)", "model's own loss", "an expression of
    criterion(...)", "computed outside the model, MeanBackward0"."""
    if root.kind == "loss_module":
        what = f"{root.source}(...)"
    elif root.kind == "model":
        what = f"{root.source}'s own loss"
    else:
        node = f", {root.node}" if root.node else ""
        return f"computed outside the model{node}"
    return what if root.exact else f"an expression of {what}"


def _bound_name(root: KeptRoot, ns: Mapping[str, object] | None) -> str | None:
    """The namespace name bound to the root tensor, if any (read once per alarm)."""
    t = root.ref() if root.ref is not None else None
    if t is None or not ns:
        return None
    for k, v in list(ns.items())[:100_000]:
        if v is t and isinstance(k, str) and not k.startswith("_"):
            return k
    return None


def values_state(root: KeptRoot) -> tuple[str, float | None]:
    """("non_finite", v) | ("finite", v) | ("unchecked", None) of the root's values: a
    root too large to keep is not checked. One host read (a sync on CUDA), per alarm."""
    import math

    import torch

    if len(root.values) < len(root.shapes):
        bad = _first_bad(root.values)
        return ("non_finite", bad) if bad is not None else ("unchecked", None)
    bad = _first_bad(root.values)
    if bad is not None:
        return "non_finite", bad
    first = root.values[0] if root.values else None
    if isinstance(first, torch.Tensor) and first.numel() == 1 and first.is_floating_point():
        v = float(first.reshape(()))
        return "finite", v if math.isfinite(v) else None
    return "finite", None


def _first_bad(values: tuple[Tensor, ...]) -> float | None:
    import math

    import torch

    for t in values:
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        if not (t.is_floating_point() or t.is_complex()):
            continue
        if t.is_complex():
            if not bool(torch.isfinite(t).all()):
                return math.inf
            continue
        if bool(torch.isnan(t).any()):
            return math.nan
        if not bool(torch.isfinite(t).all()):
            return math.inf if bool(torch.isposinf(t).any()) else -math.inf
    return None
