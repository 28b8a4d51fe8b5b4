"""What a replay's backward starts from, and how that relates to the user's loss.

From what ``backward()`` was called on at the bad step (``BadStep.root``,
backward_root.py), when the replay can run it: the root model's own loss, or a loss
module of the namespace on the replayed output with its kept target (``user_loss``
"same"; "part" when the user's loss was an expression of it). A loss computed outside the
model cannot be re-run: backward then starts from the sum of the outputs ("surrogate",
"not_rerun"). When the root was not seen: the model's own loss, else a loss module whose
kept input fits, else the surrogate, none known to be the user's ("unseen").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .loss_sources import model_loss

if TYPE_CHECKING:
    from torch import Tensor

    from .bad_step import KeptLoss, KeptRoot


def relation(root: KeptRoot | None, name: str, losses: list[KeptLoss]) -> str:
    """How a replay of root ``name`` can relate to the user's loss before it runs."""
    if root is None:
        return "unseen"
    how = "same" if root.exact else "part"
    if root.kind == "model" and root.source == name:
        return how
    if root.kind == "loss_module" and any(kl.name == root.source for kl in losses):
        return how
    return "not_rerun"


def loss_root(
    result: object,
    outputs: list[Tensor],
    losses: list[KeptLoss],
    name: str,
    root: KeptRoot | None,
) -> tuple[Tensor | None, str | None, str]:
    """What backward starts from, and how it relates to the user's loss: (loss,
    ``loss_root``, ``user_loss``: same / part / not_rerun / unseen)."""
    import torch

    outputs = [t for t in outputs if t.is_floating_point()]
    if root is not None:
        how = "same" if root.exact else "part"
        if root.kind == "model" and root.source == name:
            own = model_loss(result, torch.Tensor)
            if own is not None:
                return own, "model", how
        elif root.kind == "loss_module":
            for kl in losses:
                if kl.name == root.source:
                    loss = _module_loss(kl, outputs)
                    if loss is not None:
                        return loss, f"loss_module:{kl.name}", how
        return _surrogate(outputs), "surrogate", "not_rerun"
    # What backward() was called on was not seen: the model's own loss, else a loss
    # module whose kept input fits, else the sum of the outputs; none of them is known
    # to be the user's loss.
    own = model_loss(result, torch.Tensor)
    if own is not None:
        return own, "model", "unseen"
    for kl in losses:
        loss = _module_loss(kl, outputs)
        if loss is not None:
            return loss, f"loss_module:{kl.name}", "unseen"
    return _surrogate(outputs), "surrogate", "unseen"


def _module_loss(kl: KeptLoss, outputs: list[Tensor]) -> Tensor | None:
    """The kept loss module on an output of its kept input's size, with its kept target."""
    import torch

    m = kl.module()
    if m is None or kl.input_shape is None:
        return None
    n = math.prod(kl.input_shape)
    for t in outputs:
        if t.numel() == n:
            loss = m(t.reshape(kl.input_shape), *kl.rest, **kl.kwargs)
            if isinstance(loss, torch.Tensor) and loss.numel() == 1:
                return loss.reshape(())
    return None


def _surrogate(outputs: list[Tensor]) -> Tensor | None:
    import torch

    graph = [t for t in outputs if t.requires_grad]
    if not graph:
        return None
    return torch.stack([t.float().sum() for t in graph]).sum()
