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

Layers are named by the kernel's own naming (kernel/grads/naming.py ``build_plan``), once
per optimizer: the namespace is the stepping thread's frames (their locals and globals,
innermost first; ``self`` after the other names), so a rank's layers read as the
notebook's (``model.fc1``, largest model first, wrapper levels such as DDP's ``module.``,
FSDP's and ``torch.compile``'s dropped, in the model's order, more than ``MAX_LAYERS``
merged into their parents); a parameter no module names is ``<optimizer>.group<g>.p<i>``.
``watch()`` called in the worker limits its scope as in the kernel. Optimizers and modules
are held by weakref only; no tensor outlives the read.

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
from typing import TYPE_CHECKING

from ...kernel.backward_boundary import ModelSource
from ...kernel.grads.naming import MAX_LAYERS as NAMING_MAX_LAYERS
from ...kernel.grads.naming import Stepped, build_plan, group_sig, module_type, optimizer_name
from ...kernel.watches import watch_version

if TYPE_CHECKING:
    import torch


#: Frames searched for the model, innermost first.
FRAME_DEPTH = 40
#: Most layers sent in one ``layers`` entry (model order): the kernel's naming merges
#: layers past its limit into their parents, so every layer is sent.
MAX_LAYERS = NAMING_MAX_LAYERS


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
    """An optimizer's parameters grouped into layers: the kernel's plan (naming.py),
    built once per optimizer and again when its parameter groups or the watches change."""

    signature: tuple[tuple[int, int], ...]
    watch_version: int
    #: The parameters read (trainable, each once, in scope of ``watch()``), and each one's
    #: layer (an index into ``names``).
    params: list[torch.Tensor]
    layer_of: list[int]
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

        layout = self._layout(optimizer, frame)
        which: list[int] = []
        grads: list[torch.Tensor] = []
        with_grad: list[torch.Tensor] = []
        for p, layer in zip(layout.params, layout.layer_of, strict=True):
            g = p.grad
            if g is not None:
                which.append(layer)
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

        layout = self._layout(optimizer, frame)
        if not layout.params:
            return None
        weights, _ = local_shards([p.detach() for p in layout.params])
        with torch.no_grad():
            try:
                values = torch.stack(torch._foreach_norm(weights))
                norms = values.double().tolist()
            except Exception:  # sparse, mixed devices: tensor by tensor
                norms = [float(torch.linalg.vector_norm(w.float())) for w in weights]
        squares = [0.0] * len(layout.names)
        for layer, v in zip(layout.layer_of, norms, strict=True):
            squares[layer] += v * v
        return [math.sqrt(sum(squares)), *(math.sqrt(x) for x in squares[:MAX_LAYERS])]

    def _layout(self, optimizer: Stepped, frame: FrameType | None) -> _Layout:
        sig = group_sig(optimizer)
        version = watch_version()
        try:
            known = self._layouts.get(optimizer)
        except TypeError:
            known = None
        if known is not None and known.signature == sig and known.watch_version == version:
            return known
        layout = make_layout(optimizer, frame_namespace(frame))
        try:
            self._layouts[optimizer] = layout
        except TypeError:
            pass  # not weakref-able: found again at each read
        return layout


def make_layout(optimizer: Stepped, ns: dict[str, object]) -> _Layout:
    """The kernel's plan for ``optimizer`` in the namespace ``ns``, and the model that
    named it (the first of the plan's roots; a manual loop's own model)."""
    track = optimizer_name(optimizer, ns, set())
    plan = build_plan(optimizer, track, ns)
    layout = _Layout(
        plan.sig, plan.watch_version, plan.params, plan.layer_of, [x.name for x in plan.layers]
    )
    module: torch.nn.Module | None = None
    name: str | None = None
    for root_name, ref in plan.roots:
        module, name = ref(), root_name
        if module is not None:
            break
    if isinstance(optimizer, ModelSource) and optimizer.model is not None:
        model = optimizer.model  # a loop without an optimizer: its model
        if module is not model and module is not getattr(model, "module", None):
            module, name = model, optimizer.name
    if module is not None:
        try:
            layout.module, layout.module_name = weakref.ref(module), name
        except TypeError:
            pass
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
    """The names bound in the training thread's frames (innermost first wins; ``self``
    after every other name, so a model is named as the script binds it, not as a method
    sees it)."""
    ns: dict[str, object] = {}
    selves: list[object] = []
    f = frame
    depth = 0
    while f is not None and depth < FRAME_DEPTH:
        for space in (f.f_locals, f.f_globals):
            try:
                items = list(space.items())
            except Exception:
                continue
            for k, v in items:
                if k == "self":
                    selves.append(v)
                elif isinstance(k, str):
                    ns.setdefault(k, v)
        f = f.f_back
        depth += 1
    module_t = module_type()
    for v in selves:  # the innermost ``self`` that is a module (not an optimizer's)
        if module_t is not None and isinstance(v, module_t):
            ns["self"] = v
            break
    return ns


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
