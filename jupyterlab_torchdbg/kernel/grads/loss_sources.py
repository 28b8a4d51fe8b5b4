"""What is a loss: the namespace's loss modules, and a model's own loss in its output.

The loss is what ``backward()`` is called on (backward_root.py); these are the places the
keeper (inputs.py) can see one being made, to say which loss it was and to let the replay
run it again:

- loss modules of the namespace: torch's (``nn.modules.loss._Loss``: ``criterion``,
  ``loss_fn``), and parameter-free modules of a class outside torch (``class
  FocalLoss(nn.Module)``), kept only when they return a scalar;
- a root model's own loss: a scalar output, an output's ``.loss`` (Hugging Face's
  ``ModelOutput``, read from the instance, never through a property) or ``["loss"]``, a
  tuple's leading scalar (``return_dict=False`` with labels).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module

#: Loss modules hooked at most (the namespace's first).
MAX_LOSSES = 32
#: Container levels and items looked at in a model's output.
MAX_DEPTH = 2
MAX_ITEMS = 64


def loss_modules(ns: Mapping[str, object]) -> list[tuple[str, Module]]:
    """(name, module) for the loss modules bound in the namespace: torch's (``_Loss``)
    and parameter-free modules of a class outside torch (``class FocalLoss(nn.Module)``;
    such a module is kept only when it returns a scalar, see ``_loss_hook``)."""
    loss_mod = sys.modules.get("torch.nn.modules.loss")
    base = getattr(loss_mod, "_Loss", None)
    nn_module = getattr(sys.modules.get("torch.nn"), "Module", None)
    if base is None or nn_module is None:
        return []
    out: list[tuple[str, Module]] = []
    seen: set[int] = set()
    for k, v in list(ns.items()):
        if len(out) >= MAX_LOSSES:
            break
        if not isinstance(k, str) or k.startswith("_") or id(v) in seen:
            continue
        if isinstance(v, base) or (isinstance(v, nn_module) and _own_loss_like(v)):
            seen.add(id(v))
            out.append((k, v))
    return out


def _own_loss_like(module: Module) -> bool:
    """A module of the user's (or a library's) own class with no parameters at all."""
    cls = type(module)
    if cls.__module__.split(".")[0] == "torch":
        return False
    try:
        return next(iter(module.parameters()), None) is None
    except Exception:
        return False


def is_torch_loss(module: Module) -> bool:
    base = getattr(sys.modules.get("torch.nn.modules.loss"), "_Loss", None)
    return base is not None and isinstance(module, base)


def scalar_with_grad(value: object, tensor: type[Tensor]) -> bool:
    return (
        isinstance(value, tensor)
        and value.numel() == 1
        and value.is_floating_point()
        and value.requires_grad
    )


def output_nodes(output: object, tensor: type[Tensor]) -> tuple[list[Tensor], Tensor | None]:
    """(the tensors of ``output`` whose autograd nodes to arm, the model's own loss or
    None): the loss (``.loss``, ``["loss"]``, a scalar output, a leading scalar of a
    tuple) and the first other tensor with a node, two levels deep — a backward from
    the model's loss passes the loss's node, one from the user's own loss on the logits
    passes the other's."""
    loss = model_loss(output, tensor)
    if loss is not None and loss.grad_fn is None:
        loss = None
    armed = [] if loss is None else [loss]
    stack: list[tuple[object, int]] = [(output, 0)]
    looked = 0
    while stack and looked < MAX_ITEMS:
        value, depth = stack.pop(0)
        looked += 1
        if isinstance(value, tensor):
            if value.grad_fn is not None and value is not loss:
                return [*armed, value], loss
        elif (
            depth < MAX_DEPTH and isinstance(value, (tuple, list)) and type(value) in (tuple, list)
        ):
            stack.extend((v, depth + 1) for v in value[:MAX_ITEMS])
        elif depth < MAX_DEPTH and isinstance(value, dict):
            stack.extend((v, depth + 1) for v in list(value.values())[:MAX_ITEMS])
    return armed, loss


def model_loss(result: object, tensor: type[Tensor]) -> Tensor | None:
    """A scalar output, an output's ``.loss`` (Hugging Face) or ``["loss"]``, or a tuple's
    leading scalar (``return_dict=False`` with labels); None otherwise."""

    def scalar(v: object) -> Tensor | None:
        if isinstance(v, tensor) and v.ndim == 0 and v.is_floating_point():
            return v
        return None

    if isinstance(result, tensor):
        return scalar(result)
    if isinstance(result, dict) and "loss" in result:
        return scalar(result["loss"])
    if not isinstance(result, (tuple, list)):
        # An instance attribute only (a dataclass, a ModelOutput): never a property,
        # which would run the user's code at every forward.
        attrs = getattr(result, "__dict__", None)
        own = scalar(attrs.get("loss")) if isinstance(attrs, dict) else None
        if own is not None:
            return own
    if isinstance(result, (tuple, list)) and result:
        return scalar(result[0])
    return None
