"""Normalisation running statistics from before a batch, so a skipped step leaves no trace (R48).

Skipping a non-finite optimizer step (skip.py) keeps the weights and the optimizer state
as they were, but the forward pass has already run: each BatchNorm (and InstanceNorm
with ``track_running_stats``) in training mode folded the batch into ``running_mean`` /
``running_var`` and counted it in ``num_batches_tracked``. A NaN batch leaves them NaN,
and ``model.eval()`` then outputs NaN for every input.

So while a track skips non-finite steps, the keeper's forward pre-hook on each of its
root models (inputs.py) copies those buffers at the first forward after each step
(``take``: one ``torch._foreach_copy_`` into copies made once, the size of the statistics;
gradient accumulation's later micro-batches do not copy again). A skipped step puts them
back (``restore``), so the model is as if its batches since the last step never ran;
every step boundary re-arms the copy. Buffers replaced since the list was made
(``model.to()``, a reassigned buffer) are not restored, and ``restore`` says which.

Other buffers (a user's EMA, counters) are not copied: what the forward changed there is
not known, and the skip alert says so (nonfinite.py). Cost, only while skipping: one
foreach copy per step (a few µs on CPU for a few layers; no host sync on CUDA).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module

#: Normalisation layers looked at per root (the first ones of a huge model).
MAX_LAYERS = 4096
_STATS = ("running_mean", "running_var", "num_batches_tracked")


def norm_buffers(root: Module) -> list[tuple[str, Module, str, Tensor]]:
    """(qualified name, module, attribute, buffer) of every running statistic of the
    normalisation layers under ``root`` (``_NormBase``: BatchNorm*, SyncBatchNorm,
    InstanceNorm* with ``track_running_stats``)."""
    import torch
    from torch.nn.modules.batchnorm import _NormBase

    out: list[tuple[str, Module, str, torch.Tensor]] = []
    for i, (name, m) in enumerate(root.named_modules()):
        if i >= MAX_LAYERS:
            break
        if not isinstance(m, _NormBase) or not m.track_running_stats:
            continue
        for attr in _STATS:
            b = m._buffers.get(attr)
            if isinstance(b, torch.Tensor) and not b.is_meta:
                out.append((f"{name}.{attr}" if name else attr, m, attr, b))
    return out


class NormShadow:
    """One root's running statistics, copied at the first forward after each step."""

    def __init__(self, root: Module) -> None:
        self._lock = threading.Lock()
        self.entries = norm_buffers(root)
        self._copies: list[Tensor] = []
        #: The next forward copies (set at every step boundary).
        self.due = True
        #: The copies are from before this step's first forward.
        self.valid = False

    @property
    def layers(self) -> int:
        return len({id(m) for _, m, _, _ in self.entries})

    def take(self) -> None:
        """The root's forward pre-hook: copy at the first forward since the last step."""
        if not self.due or not self.entries:
            return
        import torch

        with self._lock:
            live = [b for _, _, _, b in self.entries]
            if len(self._copies) != len(live):
                self._copies = [torch.empty_like(b) for b in live]
            with torch.no_grad():
                torch._foreach_copy_(self._copies, live)
            self.due, self.valid = False, True

    def restore(self) -> tuple[list[str], list[str]]:
        """Put the copies back; (restored names, names of layers in training mode not
        restored: no copy from before this step's forward, or the buffer was replaced)."""
        import torch

        with self._lock:
            if not self.valid:
                return [], [n for n, m, _, _ in self.entries if m.training]
            done: list[str] = []
            missed: list[str] = []
            dst: list[Tensor] = []
            src: list[Tensor] = []
            for (name, m, attr, b), copy in zip(self.entries, self._copies, strict=True):
                if m._buffers.get(attr) is b:
                    dst.append(b)
                    src.append(copy)
                    done.append(name)
                elif m.training:
                    missed.append(name)
            if dst:
                with torch.no_grad():
                    torch._foreach_copy_(dst, src)
            return done, missed

    def rearm(self) -> None:
        """A step boundary: the next forward copies again."""
        self.due, self.valid = True, False
