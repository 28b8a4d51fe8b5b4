"""A non-finite step caught at the step boundary, before the optimizer touched the weights.

Shared by the at-step diagnosis (monitor.py, inputs.py, probe.py: which input, module, loss
or backward made the NaN) and the replay (replay.py: forward + backward of the kept batch
under ``torch.autograd.detect_anomaly``). Only references the training loop holds anyway:
the last forward call of each root module (positional and keyword arguments, detached
views, never copies, R25); for each loss module of the namespace, its target and the
shape of its input (the input itself, the model's output, is not held); and the tensor
the last ``backward()`` was called on (backward_root.py: its value as a detached view of
a few elements, never its graph).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module
    from torch.optim import Optimizer


@dataclass
class KeptCall:
    """One forward call of a module: its arguments, by reference (detached)."""

    #: Positional arguments (tensors detached; other values as passed).
    args: tuple[object, ...]
    #: Keyword arguments (tensors detached; other values as passed).
    kwargs: dict[str, object]
    #: How many forward calls of this module the keeper has seen (1 for the first).
    call: int = 0


@dataclass
class KeptLoss:
    """The last call of a loss module (``nn.modules.loss._Loss``) of the namespace."""

    module: weakref.ref[Module]
    #: The loss module's name in the namespace (``criterion``, ``loss_fn``).
    name: str
    #: Shape of its first argument (the model's output, possibly reshaped); not held.
    input_shape: tuple[int, ...] | None
    #: The remaining arguments (the target), by reference.
    rest: tuple[object, ...]
    kwargs: dict[str, object] = field(default_factory=dict)
    #: Its output (the 0-d loss of that call, detached: a few bytes), or None.
    output: Tensor | None = None
    #: The keeper's call counter at this call: a loss called after the model's last
    #: forward (a larger number than that ``KeptCall.call``) belongs to that batch.
    call: int = 0


@dataclass
class KeptRoot:
    """What the last ``backward()`` was called on (backward_root.py): the loss, as the
    user computed it, whatever computed it."""

    #: Detached views of the root tensors of at most ``MAX_VALUES`` elements (no graph).
    values: tuple[Tensor, ...]
    #: Shapes of all root tensors (``backward()`` may be given several).
    shapes: tuple[tuple[int, ...], ...]
    #: "model": a root model's own loss (``.loss``, a scalar output); "loss_module": a
    #: loss module's output; "expression": computed by code the tool does not see.
    kind: str
    #: The root model's or the loss module's name (None for an expression).
    source: str | None
    #: True: the root is that very tensor; False: an expression of it (``loss / accum``,
    #: ``ce + 0.1 * reg``) found in the root's graph.
    exact: bool
    #: The root's autograd node (``MeanBackward0``), None for a leaf.
    node: str | None
    #: The keeper's call counter at that backward (after the forward it belongs to).
    call: int
    #: A weak reference to the first root tensor (its name in the namespace, if bound).
    ref: weakref.ref[Tensor] | None = None
    #: Every marked loss found in the root's expression (``ce``, ``nll``), graph order.
    terms: tuple[str, ...] = ()


@dataclass
class BadStep:
    """What is known about the first non-finite step of a track (one per alarm)."""

    #: The optimizer track's name (``grad/<track>/...``).
    track: str
    #: The track's step number of the bad step.
    step: int
    #: The optimizer (None for the end-of-backward boundary of a loop without one).
    optimizer: weakref.ref[Optimizer] | None
    #: (name, module) roots whose parameters the track reads, by weakref.
    roots: list[tuple[str, weakref.ref[Module]]]
    #: Root name -> its last forward call (the batch of the bad step).
    calls: dict[str, KeptCall]
    #: Loss modules of the namespace and their last call.
    losses: list[KeptLoss] = field(default_factory=list)
    #: The diagnosed cause: "input", "forward", "weights", "loss", "backward" or None.
    cause: str | None = None
    #: True when the optimizer step was skipped (``skip_nonfinite``): weights unchanged.
    skipped: bool = False
    #: The diagnosis message (the alert's), for the replay's report.
    message: str | None = None
    #: What ``backward()`` was called on at that step (None: not seen).
    root: KeptRoot | None = None
