"""Per-tensor gradient norms in one pass, left on the device (no host sync, R26).

At a sampled step the monitor calls ``grad_row``: one ``torch._foreach_norm`` per
(device, dtype) group — the same read of the gradients ``clip_grad_norm_`` does — and one
``torch.stack`` into a 1-D row in the plan's parameter order. The row stays on its device;
the stream copies all pending rows to the host once per flush, where ``Layout`` turns
per-tensor norms into per-layer norms and the total (sqrt of the sum of squares, which is
exactly how ``get_total_norm`` combines per-tensor norms).

R33: missing grads contribute 0 (their layer still has a column); sparse grads take a
per-tensor fallback (coalesced values); fp16/bf16 are reduced in fp32; complex grads give
the real L2 norm (sqrt of the sum of |z|^2). R35: DTensor grads are read as their local
shard — never a collective.

This module imports torch; it is imported only once torch is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

_LOW = (torch.float16, torch.bfloat16)
_zeros: dict[torch.device, Tensor] = {}
_nans: dict[torch.device, Tensor] = {}


def one_norm(t: Tensor) -> Tensor:
    """L2 norm of one tensor of any layout/dtype as a 0-d tensor on its device."""
    if t.layout != torch.strided:
        # COO may hold duplicate indices (summed on coalesce); compressed layouts do not.
        t = t.coalesce().values() if t.layout == torch.sparse_coo else t.values()
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    # torch.linalg is untyped (its functions return Any).
    if t.dtype in _LOW:
        return cast(Tensor, torch.linalg.vector_norm(t, 2, dtype=torch.float32))
    return cast(Tensor, torch.linalg.vector_norm(t, 2))


def _group_norms(ts: list[Tensor], dtype: torch.dtype) -> list[Tensor]:
    try:
        if dtype in _LOW:
            return list(torch._foreach_norm(ts, 2, dtype=torch.float32))
        return list(torch._foreach_norm(ts, 2))
    except (RuntimeError, NotImplementedError, TypeError):
        # sparse or otherwise unsupported by foreach: one tensor at a time
        return [one_norm(t) for t in ts]


def norms_in_order(tensors: list[Tensor]) -> list[Tensor]:
    """0-d L2 norms of ``tensors`` in their order, all on the first tensor's device."""
    # Typed for lists that may hold None; none of ours do, so no group does either.
    nested = cast("list[list[Tensor | None]]", [tensors])
    grouped = torch._C._group_tensors_by_device_and_dtype(nested, True)
    if len(grouped) == 1:
        # The common case: one device, one dtype, already in order.
        ((_device, dtype), ([ts], _idx)) = next(iter(grouped.items()))
        return _group_norms(cast("list[Tensor]", ts), dtype)
    first = tensors[0].device
    out: list[Tensor | None] = [None] * len(tensors)
    for (device, dtype), ([ts], idx) in grouped.items():
        norms = _group_norms(cast("list[Tensor]", ts), dtype)
        if device != first:
            norms = [n.to(first, non_blocking=True) for n in norms]
        for i, n in zip(idx, norms, strict=True):
            out[i] = n
    return cast("list[Tensor]", out)  # every index is in exactly one group


def _local(t: Tensor) -> tuple[Tensor, bool]:
    """A plain tensor to reduce: a DTensor's local shard (R35), else itself."""
    local = getattr(t, "_local_tensor", None)
    if isinstance(local, Tensor):
        return local, True
    return t, False


def _cached(cache: dict[torch.device, Tensor], device: torch.device, value: float) -> Tensor:
    t = cache.get(device)
    if t is None:
        t = cache[device] = torch.full((), value, dtype=torch.float32, device=device)
    return t


@dataclass
class Row:
    """One sampled step: per-tensor norms (+ AMP scale), still on the device."""

    values: Tensor
    present: int
    local_shard: bool


@torch.no_grad()
def grad_row(
    params: Sequence[Tensor],
    scale: Tensor | None = None,
    amp: bool = False,
    unscale: Tensor | None = None,
) -> Row | None:
    """Norms of ``p.grad`` for each of ``params`` (0 where grad is None) as one tensor.

    With ``amp`` the row gets one more value: ``scale`` (GradScaler's scale at this step)
    or NaN when this step did not come through the scaler. ``unscale``: the gradients
    are still multiplied by it (a fused optimizer stepped by GradScaler divides them in
    its kernel, gradscaler.py): the norms are divided by it, on the device (R31).
    """
    grads = [p.grad for p in params]
    present = [g for g in grads if g is not None]
    if not present:
        return None
    local_shard = False
    if set(map(type, present)) != {Tensor}:
        pairs = [_local(g) for g in present]
        present = [t for t, _ in pairs]
        local_shard = any(flag for _, flag in pairs)
    norms = norms_in_order(present)
    device = present[0].device
    if len(present) != len(grads):
        zero = _cached(_zeros, device, 0.0)
        it = iter(norms)
        norms = [zero if g is None else next(it) for g in grads]
    if amp:
        if scale is not None:
            norms.append(scale.detach().reshape(()).to(device, torch.float32, non_blocking=True))
        else:
            norms.append(_cached(_nans, device, float("nan")))
    values = torch.stack(norms)
    if unscale is not None:
        values[: len(grads)].div_(unscale.detach().reshape(()).to(device, non_blocking=True))
    return Row(values, len(present), local_shard)


def values_nonfinite(params: Sequence[Tensor], norms: Tensor) -> bool:
    """Whether a gradient whose norm is non-finite holds NaN/Inf (finite values can
    overflow float32's sum of squares: ~1e19 each). Host reads, one per such tensor:
    only where the caller may read the device (the norms are known non-finite)."""
    bad = (~torch.isfinite(norms)).nonzero().flatten().tolist()
    for i in bad:
        g = params[i].grad if i < len(params) else None
        if g is None:
            return True  # a norm without a gradient: not ours to explain, counted bad
        v = _local(g)[0]
        if v.layout != torch.strided:
            v = v.coalesce().values() if v.layout == torch.sparse_coo else v.values()
        if not bool(torch.isfinite(v).all()):
            return True
    return False


@torch.no_grad()
def param_row(params: Sequence[Tensor]) -> Tensor | None:
    """Norms of the parameters themselves (weights), in order, as one device tensor."""
    if not params:
        return None
    tensors = [_local(p)[0] for p in params]  # no_grad: no view of each weight needed
    return torch.stack(norms_in_order(tensors))


class Layout:
    """Host-side transform: per-tensor norm rows -> ``[total, layer_1..layer_L, (scale)]``.

    Runs at flush on a CPU tensor ``rows x width``; squares are summed in float64 so a
    norm near the float32 limit does not overflow before the square root. numpy does it
    in a handful of calls (a permutation into layer order, one ``add.reduceat``); torch
    is the fallback.
    """

    def __init__(self, layer_of: Sequence[int], n_layers: int, amp: bool) -> None:
        self.n = len(layer_of)
        self.n_layers = n_layers
        self.amp = amp
        self.index = torch.tensor(list(layer_of), dtype=torch.long)
        order = sorted(range(self.n), key=lambda i: layer_of[i])  # stable: by layer
        self._perm = None if order == list(range(self.n)) else order
        self._starts = [
            i for i, j in enumerate(order) if i == 0 or layer_of[order[i - 1]] != layer_of[j]
        ]

    @property
    def width(self) -> int:
        return 1 + self.n_layers + (1 if self.amp else 0)

    def __call__(self, m: Tensor) -> Tensor:
        try:
            return self._numpy(m)
        except ImportError:
            return self._torch(m)

    def _numpy(self, m: Tensor) -> Tensor:
        import numpy as np

        a = m.numpy().astype(np.float64)
        sq = np.square(a[:, : self.n])
        if self._perm is not None:
            sq = sq[:, self._perm]
        out = np.empty((a.shape[0], self.width), dtype=np.float64)
        out[:, 0] = sq.sum(axis=1)
        out[:, 1 : 1 + self.n_layers] = np.add.reduceat(sq, self._starts, axis=1)
        np.sqrt(out[:, : 1 + self.n_layers], out=out[:, : 1 + self.n_layers])
        if self.amp:
            out[:, -1] = a[:, self.n]
        return torch.from_numpy(out.astype(np.float32))

    def _torch(self, m: Tensor) -> Tensor:
        m = m.to(torch.float64)
        sq = m[:, : self.n].square()
        rows = m.shape[0]
        layers = torch.zeros((rows, self.n_layers), dtype=torch.float64)
        layers.index_add_(1, self.index, sq)
        parts = [sq.sum(1, keepdim=True).sqrt_(), layers.sqrt_()]
        if self.amp:
            parts.append(m[:, self.n : self.n + 1])
        return torch.cat(parts, 1).to(torch.float32)
