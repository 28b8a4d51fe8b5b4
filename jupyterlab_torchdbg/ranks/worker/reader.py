"""What a worker reads at a sampled optimizer step: gradient norms and memory.

The read runs in torch's step pre-hook, on the training thread, after DDP's all-reduce:
every replica holds the same gradients, so every rank must find the same norms (a
difference is a desync, which the kernel's alarm looks for). The per-tensor norms are the
kernel's read (kernel/grads/collector.py ``norms_in_order``: one ``torch._foreach_norm``
per device and dtype, the read ``clip_grad_norm_`` does), stacked into one row left on
the device: ``Read.norms``, which an agreed clip at this step reuses (agreed.py, as the
kernel's clip does). On the CPU the row is host memory already and is read at once; on
an accelerator a non-blocking copy into pinned memory starts (``DeviceRow``) and the
agent's thread waits for it, never the training thread (no host-device sync per step,
as in the kernel, R26). The per-layer and total norms are sums of squares on the host,
in a fixed order, so equal gradients give bit-equal figures on every rank.

Layer names come from the model, found once per optimizer: the stepping thread's frames
are searched for ``nn.Module`` locals and globals holding the optimizer's parameters
(the one covering most of them, the smallest on a tie); wrapper prefixes (DDP's
``module.``, FSDP's, ``torch.compile``'s) are dropped. Without a model: ``param[i]``.
Optimizers and modules are held by weakref only; no tensor outlives the read.

Sharded gradients (FSDP's ``fully_shard``: ``DTensor`` gradients) are read shard by shard:
the norms are of this rank's local shards (``to_local()``), never of the whole tensor,
which would take a collective. ``Read.replicas`` says how many ranks hold each shard (1
for plain FSDP, the replicate dimension's size for HSDP), so the kernel can combine the
ranks' shard norms of one step into the global norm with no collective of ours
(kernel/job.py, ``Job.global_norm``).
"""

from __future__ import annotations

import math
import os
import sys
import weakref
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, TypeAlias

from ...kernel.backward_boundary import ModelSource

if TYPE_CHECKING:
    import torch

#: What a rank steps: an optimizer, or the model a loop updates by hand (manual.py).
Stepped: TypeAlias = "torch.optim.Optimizer | ModelSource"

#: Path segments of wrapper modules that are not part of the user's layer names.
WRAPPER_SEGMENTS = {"module", "_fsdp_wrapped_module", "_orig_mod", "_checkpoint_wrapped_module"}
#: Frames searched for the model, innermost first.
FRAME_DEPTH = 40
#: Most layers sent in one ``layers`` entry (model order).
MAX_LAYERS = 500


@dataclass
class Read:
    """One sampled step: total norm (None without gradients) and per-layer norms; the
    model the names came from (for the non-finite diagnosis, rank_signals.py), the
    parameters that had gradients and each one's norm (read in this step only)."""

    norm: float | None
    layers: list[float] | None
    names: list[str] | None
    module: torch.nn.Module | None = None
    module_name: str | None = None
    params: list[torch.Tensor] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    #: Sharded gradients (DTensor): the ranks holding each shard (the norms are this
    #: rank's shards'); None when the gradients are whole tensors.
    replicas: int | None = None
    #: Each gradient's norm, aligned with ``params``: one tensor on the gradients'
    #: device (what a clip at this step reuses). Dropped once the step is over.
    norms: torch.Tensor | None = None
    #: The row's copy to the host, while it is in flight (an accelerator's gradients):
    #: ``norm``, ``layers`` and ``values`` are None / empty until ``resolve``.
    pending: DeviceRow | None = None
    #: Each gradient's layer (an index into ``all_names``).
    which: list[int] = field(default_factory=list)
    all_names: list[str] = field(default_factory=list)

    def resolve(self, values: list[float]) -> None:
        """The per-tensor norms on the host: the total and per-layer norms from them."""
        squares = [0.0] * len(self.all_names)
        total = 0.0
        for layer, v in zip(self.which, values, strict=True):
            sq = v * v
            squares[layer] += sq
            total += sq
        self.values = values
        self.norm = math.sqrt(total)
        self.layers = [math.sqrt(s) for s in squares[:MAX_LAYERS]]
        self.names = self.all_names[:MAX_LAYERS]
        self.pending = None


class DeviceRow:
    """A row of norms on its way from an accelerator to the host: a non-blocking copy into
    pinned memory and its CUDA event (the kernel's way, kernel/stream/host_copy.py).
    Started on the training thread; ``wait`` runs on the agent's thread."""

    def __init__(self, row: torch.Tensor) -> None:
        import torch

        self.event: torch.cuda.Event | None = None
        if row.device.type == "cuda":
            self.host = torch.empty(row.shape, dtype=row.dtype, pin_memory=True)
            self.host.copy_(row, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(row.device))
        else:  # another accelerator: no event API to wait on here, so copy now
            self.host = row.cpu()

    def ready(self) -> bool:
        return self.event is None or bool(self.event.query())

    def wait(self) -> list[float]:
        """The host values (blocks the calling thread, the agent's, until copied)."""
        if self.event is not None:
            self.event.synchronize()
        return [float(v) for v in self.host.double().tolist()]


@dataclass
class _Layout:
    """An optimizer's parameters grouped into layers (found once per optimizer)."""

    signature: tuple[tuple[int, int], ...]
    layer_of: dict[int, int]  # id(param) -> index into names
    names: list[str]
    #: The model the names came from (weakly), and its name in the frame it was found in.
    module: weakref.ref[torch.nn.Module] | None = None
    module_name: str | None = None


class Reader:
    """Reads norms for any optimizer; remembers each optimizer's layer layout."""

    def __init__(self) -> None:
        self._layouts: weakref.WeakKeyDictionary[Stepped, _Layout] = weakref.WeakKeyDictionary()

    def read(self, optimizer: Stepped, frame: FrameType | None) -> Read:
        import torch

        params = [p for g in optimizer.param_groups for p in g["params"]]
        layout = self._layout(optimizer, params, frame)
        which: list[int] = []
        grads: list[torch.Tensor] = []
        with_grad: list[torch.Tensor] = []
        for p in params:
            g = p.grad
            if g is not None:
                which.append(layout.layer_of.get(id(p), 0))
                grads.append(g)
                with_grad.append(p)
        module = layout.module() if layout.module is not None else None
        if not grads:
            return Read(None, None, None, module, layout.module_name)
        from ...kernel.grads.collector import norms_in_order

        grads, replicas = local_shards(grads)
        with torch.no_grad():
            row = torch.stack(norms_in_order(grads))  # the kernel's read, on the device
        del grads
        read = Read(None, None, None, module, layout.module_name, with_grad, [], replicas)
        read.norms, read.which, read.all_names = row, which, layout.names
        if row.device.type == "cpu":
            read.resolve(row.double().tolist())  # host memory already: nothing to wait for
        else:
            read.pending = DeviceRow(row)
        return read

    def weights(self, optimizer: Stepped, frame: FrameType | None) -> list[float] | None:
        """The weights' norms, ``[total, layer_1..L]`` in the layout of ``read`` (the
        scale an explosion is judged against, kernel/grads/explosion.py). One host copy;
        called on the first steps and about once a second, not every step."""
        import torch

        params = [p for g in optimizer.param_groups for p in g["params"]]
        if not params:
            return None
        layout = self._layout(optimizer, params, frame)
        weights, _ = local_shards([p.detach() for p in params])
        with torch.no_grad():
            try:
                values = torch.stack(torch._foreach_norm(weights))
                norms = values.double().tolist()
            except Exception:  # sparse, mixed devices: tensor by tensor
                norms = [float(torch.linalg.vector_norm(w.float())) for w in weights]
        squares = [0.0] * len(layout.names)
        for p, v in zip(params, norms, strict=True):
            squares[layout.layer_of.get(id(p), 0)] += v * v
        return [math.sqrt(sum(squares)), *(math.sqrt(x) for x in squares[:MAX_LAYERS])]

    def _layout(
        self, optimizer: Stepped, params: list[torch.Tensor], frame: FrameType | None
    ) -> _Layout:
        sig = tuple((id(g["params"]), len(g["params"])) for g in optimizer.param_groups)
        try:
            known = self._layouts.get(optimizer)
        except TypeError:
            known = None
        if known is not None and known.signature == sig:
            return known
        module, name = find_module(params, frame)
        if isinstance(optimizer, ModelSource):  # a loop without an optimizer: its model
            model = optimizer.model
            inner = getattr(model, "module", None)
            if model is not None and module is not model and module is not inner:
                module, name = model, optimizer.name
        layout = _make_layout(sig, params, module)
        if module is not None:
            try:
                layout.module, layout.module_name = weakref.ref(module), name
            except TypeError:
                pass
        try:
            self._layouts[optimizer] = layout
        except TypeError:
            pass  # not weakref-able: found again at each read
        return layout


def local_shards(tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], int | None]:
    """This rank's shards of ``DTensor`` gradients (``to_local()``: no communication) and
    how many ranks hold each shard (the product of the mesh's replicated dimensions);
    plain tensors as they are, with None."""
    try:
        from torch.distributed.tensor import DTensor
    except Exception:  # torch without distributed tensors
        return tensors, None
    if not any(isinstance(t, DTensor) for t in tensors):
        return tensors, None
    replicas = 1
    out: list[torch.Tensor] = []
    for t in tensors:
        if isinstance(t, DTensor):
            try:
                mesh, placements = t.device_mesh, t.placements
                r = 1
                for dim, placement in enumerate(placements):
                    if placement.is_replicate():
                        r *= int(mesh.size(dim))
                replicas = max(replicas, r)
            except Exception:
                pass
            out.append(t.to_local())
        else:
            out.append(t)
    return out, replicas


def frame_namespace(frame: FrameType | None) -> dict[str, object]:
    """The names bound in the training thread's frames (innermost first wins)."""
    ns: dict[str, object] = {}
    f = frame
    depth = 0
    while f is not None and depth < FRAME_DEPTH:
        for space in (f.f_locals, f.f_globals):
            try:
                items = list(space.items())
            except Exception:
                continue
            for k, v in items:
                if isinstance(k, str):
                    ns.setdefault(k, v)
        f = f.f_back
        depth += 1
    return ns


def find_module(
    params: list[torch.Tensor], frame: FrameType | None
) -> tuple[torch.nn.Module | None, str | None]:
    """The ``nn.Module`` in the stepping thread's frames that holds the most of
    ``params`` (the smallest such on a tie) and the name it is bound to there, or
    (None, None)."""
    from torch import nn

    wanted = {id(p) for p in params}
    seen: set[int] = set()
    best: tuple[int, int] | None = None
    found: nn.Module | None = None
    found_name: str | None = None
    for key, value in frame_namespace(frame).items():  # innermost binding first
        if not isinstance(value, nn.Module) or id(value) in seen:
            continue
        seen.add(id(value))
        try:
            ids = [id(p) for p in value.parameters()]
        except Exception:
            continue
        score = (len(wanted.intersection(ids)), -len(ids))
        if score[0] and (best is None or score > best):
            best, found, found_name = score, value, key
    return found, found_name


def clean_name(name: str) -> str:
    """A parameter name without wrapper segments: ``module.0.weight`` -> ``0.weight``."""
    parts = [p for p in name.split(".") if p not in WRAPPER_SEGMENTS]
    return ".".join(parts) or name


def _make_layout(
    sig: tuple[tuple[int, int], ...], params: list[torch.Tensor], module: torch.nn.Module | None
) -> _Layout:
    names_of: dict[int, str] = {}
    if module is not None:
        try:
            for param_name, param in module.named_parameters():
                names_of.setdefault(id(param), clean_name(param_name))
        except Exception:
            names_of = {}
    layer_index: dict[str, int] = {}
    layer_of: dict[int, int] = {}
    for i, p in enumerate(params):
        name = names_of.get(id(p))
        layer = name.rsplit(".", 1)[0] if name and "." in name else (name or f"param[{i}]")
        layer_of[id(p)] = layer_index.setdefault(layer, len(layer_index))
    return _Layout(sig, layer_of, list(layer_index))


def memory(optimizer: Stepped) -> tuple[int | None, str]:
    """(bytes, kind): CUDA memory allocated on the parameters' device, else the
    process's resident set size."""
    try:
        first = optimizer.param_groups[0]["params"][0]
        if first.device.type == "cuda":
            import torch

            return int(torch.cuda.memory_allocated(first.device)), "cuda"
    except Exception:
        pass
    return rss(), "host"


def rss() -> int | None:
    """This process's resident set size in bytes (Linux /proc; else the peak)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except Exception:
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)
    except Exception:
        return None
