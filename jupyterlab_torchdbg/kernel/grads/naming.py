"""Which parameters an optimizer steps, what they are called, and which layer they are in.

An optimizer only knows tensors. Names come from, in order: models given to ``watch()``;
the ``nn.Module``s bound to names in the user's namespace (the largest first, so
``model.encoder.0`` wins over ``enc.0`` when ``enc = model.encoder``; ScriptModules last);
otherwise ``<optimizer>.group<g>.p<i>``. A layer is the module owning the parameter
(``model.fc1`` for ``model.fc1.weight``). Wrapper prefixes added by ``torch.compile``,
FSDP, activation checkpointing and DataParallel/DDP are dropped, so names read as the
user's model.

Watches (``watch(model, optimizer=None, *, stride=None)``; the registry is
``kernel/watches.py``) also limit scope: once any watch is active, only watched models'
parameters (of the given optimizer, or of any optimizer stepping them) are monitored.
Everything here holds models and optimizers by weakref (R24); the plan built for an
optimizer holds its parameters only as long as the optimizer itself does (the monitor keys
plans weakly by optimizer).

A rank of a multi-process job names its layers with this same plan (ranks/worker/
reader.py), its namespace being the names bound in its training thread's frames, so a
rank's layers read as the notebook's.

A model updated by hand (no optimizer step: backward_boundary.py) is read at the end of
its backward passes; its ``ModelSource`` stands in for the optimizer here (the same
``param_groups`` shape), and its track is named after the model (``model``).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from ..backward_boundary import ModelSource
from ..watches import WatchHandle, watches

if TYPE_CHECKING:
    import torch
    from torch.amp import GradScaler

    from ...protocol.messages import GradLayerParamsItem

#: What a track steps: an optimizer, or the model a loop updates by hand (``ModelSource``,
#: which has an optimizer's ``param_groups``).
Stepped: TypeAlias = "torch.optim.Optimizer | ModelSource"

#: More layers than this are merged into their parent modules (one level at a time), so a
#: model with 10,000 tensors stays a readable chart and a bounded message (R09).
MAX_LAYERS = 512
#: Parameters listed per layer in status messages (the rest are counted).
MAX_PARAMS_LISTED = 32
#: Attribute names of wrappers whose level is not part of the user's model.
_WRAPPER_PARTS = frozenset({"_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"})
_DATA_PARALLEL = frozenset({"DataParallel", "DistributedDataParallel"})


# --- namespace scan -------------------------------------------------------------------


def module_type() -> type[torch.nn.Module] | None:
    """``torch.nn.Module`` if torch is imported (never imports it), else None."""
    nn = sys.modules.get("torch.nn")
    t: type[torch.nn.Module] | None = getattr(nn, "Module", None)
    return t


def _script_type() -> type[torch.jit.ScriptModule] | None:
    jit = sys.modules.get("torch.jit")
    t: type[torch.jit.ScriptModule] | None = getattr(jit, "ScriptModule", None)
    return t if jit is not None else None


def _scaler_types() -> tuple[type[GradScaler], ...]:
    out: list[type[GradScaler]] = []
    for mod, name in (("torch.amp.grad_scaler", "GradScaler"), ("torch.cuda.amp", "GradScaler")):
        t: type[GradScaler] | None = getattr(sys.modules.get(mod), name, None)
        if isinstance(t, type):
            out.append(t)
    return tuple(out)


def user_names(ns: Mapping[str, object]) -> dict[int, str]:
    """id(object) -> the first public name bound to it in the namespace."""
    out: dict[int, str] = {}
    for k, v in list(ns.items()):
        if isinstance(k, str) and not k.startswith("_"):
            out.setdefault(id(v), k)
    return out


def find_scaler(ns: Mapping[str, object]) -> GradScaler | None:
    """An enabled GradScaler bound in the namespace, or None."""
    types = _scaler_types()
    if not types:
        return None
    for k, v in list(ns.items()):
        if isinstance(k, str) and not k.startswith("_") and isinstance(v, types):
            if getattr(v, "_enabled", True):
                return v
    return None


def clean_param_name(root: object, name: str) -> str:
    parts = [p for p in name.split(".") if p not in _WRAPPER_PARTS]
    if parts and parts[0] == "module" and type(root).__name__ in _DATA_PARALLEL:
        parts = parts[1:]
    return ".".join(parts)


def _named_parameters(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    try:
        return list(module.named_parameters())
    except Exception:  # R29: ScriptModules and exotic modules may refuse; skip them
        return []


# --- plans ----------------------------------------------------------------------------


@dataclass
class LayerInfo:
    name: str
    params: list[GradLayerParamsItem] = field(default_factory=list)
    numel: int = 0
    more: int = 0

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "params": self.params, "numel": self.numel}
        if self.more:
            out["more_params"] = self.more
        return out


@dataclass
class Plan:
    """How one optimizer's step is read: parameters in order and their layers."""

    sig: tuple[tuple[int, int], ...]
    params: list[torch.Tensor]
    layer_of: list[int]
    layers: list[LayerInfo]
    enabled: bool = True
    reason: str | None = None
    stride: int | None = None
    watch_version: int = 0
    scaler: weakref.ref[GradScaler] | None = None
    coarsened: bool = False
    unnamed: int = 0
    #: The models that named the parameters, as (name, weakref) (the forward probe's roots).
    roots: list[tuple[str, weakref.ref[torch.nn.Module]]] = field(default_factory=list)


def group_sig(optimizer: Stepped) -> tuple[tuple[int, int], ...]:
    """Cheap identity of the optimizer's parameter lists (checked at every sample)."""
    return tuple((id(g["params"]), len(g["params"])) for g in optimizer.param_groups)


def optimizer_params(optimizer: Stepped) -> list[tuple[int, int, torch.Tensor]]:
    """(group index, index in group, tensor), each tensor once (tied params, R33)."""
    seen: set[int] = set()
    out: list[tuple[int, int, torch.Tensor]] = []
    for gi, g in enumerate(optimizer.param_groups):
        for i, p in enumerate(g["params"]):
            if id(p) not in seen:
                seen.add(id(p))
                out.append((gi, i, p))
    return out


def build_plan(optimizer: Stepped, track: str, ns: Mapping[str, object]) -> Plan:
    """Name and scope one optimizer's parameters."""
    version, active = watches()
    all_params = optimizer_params(optimizer)
    sources: list[tuple[str, torch.nn.Module]] = []
    scope: set[int] | None = None
    stride: int | None = None
    if active:
        ids = {id(p) for _, _, p in all_params}
        sources, scope, stride = _watched(optimizer, active, ids, user_names(ns))
        if not sources:
            return Plan(
                group_sig(optimizer),
                [],
                [],
                [],
                enabled=False,
                reason="not watched (watch() limits monitoring to the watched models)",
                watch_version=version,
            )
    wanted = [
        (gi, i, p)
        for gi, i, p in all_params
        if getattr(p, "requires_grad", False) and (scope is None or id(p) in scope)
    ]
    wanted_ids = {id(p) for _, _, p in wanted}
    if len(sources) < 64:
        sources += _namespace_modules(ns, wanted_ids)
    param_name, roots = _name_from_modules(sources, wanted_ids)
    order = len(param_name) and max(o for _, _, o in param_name.values())
    unnamed = 0
    for gi, i, p in wanted:
        if id(p) not in param_name:
            order += 1
            unnamed += 1
            param_name[id(p)] = (f"{track}.group{gi}.p{i}", "", order)
    layer_of, layers, coarsened = _layers([p for _, _, p in wanted], param_name)
    scaler = find_scaler(ns)
    return Plan(
        group_sig(optimizer),
        [p for _, _, p in wanted],
        layer_of,
        layers,
        enabled=bool(wanted),
        reason=None if wanted else "no trainable parameters in scope",
        stride=stride,
        watch_version=version,
        scaler=None if scaler is None else weakref.ref(scaler),
        coarsened=coarsened,
        unnamed=unnamed,
        roots=roots,
    )


def _watched(
    optimizer: Stepped,
    active: Sequence[WatchHandle],
    ids: set[int],
    names: Mapping[int, str],
) -> tuple[list[tuple[str, torch.nn.Module]], set[int], int | None]:
    """The scope ``watch()`` gives this optimizer: the watched models whose parameters it
    steps (named as in the notebook), their parameters' ids, and the smallest stride
    asked for."""
    sources: list[tuple[str, torch.nn.Module]] = []
    scope: set[int] = set()
    stride: int | None = None
    for w in active:
        model = w.model
        opt = w.optimizer
        if model is None or (opt is not None and opt is not optimizer):
            continue
        mids = {id(p) for _, p in _named_parameters(model)}
        if not mids & ids:
            continue
        scope |= mids
        sources.append((names.get(id(model)) or type(model).__name__.lower(), model))
        if w.stride is not None:
            stride = w.stride if stride is None else min(stride, w.stride)
    return sources, scope, stride


def _namespace_modules(
    ns: Mapping[str, object], wanted_ids: set[int]
) -> list[tuple[str, torch.nn.Module]]:
    """The notebook's modules holding some of the parameters, to name them by: the
    largest first, ScriptModules after the rest."""
    mod_t, script_t = module_type(), _script_type()
    if mod_t is None:
        return []
    found: list[tuple[bool, int, str, torch.nn.Module]] = []
    for k, v in list(ns.items()):
        if isinstance(k, str) and not k.startswith("_") and isinstance(v, mod_t):
            hits = sum(1 for _, p in _named_parameters(v) if id(p) in wanted_ids)
            if hits:
                is_script = script_t is not None and isinstance(v, script_t)
                found.append((is_script, -hits, k, v))
    found.sort(key=lambda t: (t[0], t[1]))
    return [(k, v) for _, _, k, v in found]


def _name_from_modules(
    sources: list[tuple[str, torch.nn.Module]], wanted_ids: set[int]
) -> tuple[dict[int, tuple[str, str, int]], list[tuple[str, weakref.ref[torch.nn.Module]]]]:
    """Each wanted parameter's (layer, param, registration order) from the first module
    that holds it, and the modules that named some (the plan's roots)."""
    param_name: dict[int, tuple[str, str, int]] = {}  # id -> (layer, param, order)
    order = 0
    roots: list[tuple[str, weakref.ref[torch.nn.Module]]] = []
    for prefix, module in sources:
        if len(param_name) == len(wanted_ids):
            break
        named_before = len(param_name)
        for pname, param in _named_parameters(module):
            order += 1
            if id(param) in wanted_ids and id(param) not in param_name:
                clean = clean_param_name(module, pname)
                layer, _, leaf = clean.rpartition(".")
                full_layer = f"{prefix}.{layer}" if layer else prefix
                param_name[id(param)] = (full_layer, leaf, order)
        if len(param_name) > named_before:
            roots.append((prefix, weakref.ref(module)))
    return param_name, roots


def _layers(
    params: list[torch.Tensor], param_name: dict[int, tuple[str, str, int]]
) -> tuple[list[int], list[LayerInfo], bool]:
    """The layers in model order (their first parameter's registration order, not the
    optimizer's), each parameter's layer, and whether names were cut to fit
    ``MAX_LAYERS``."""
    layer_names = [param_name[id(p)][0] for p in params]
    coarsened = False
    if len(set(layer_names)) > MAX_LAYERS:
        layer_names = _coarsen(layer_names)
        coarsened = True
    first: dict[str, int] = {}
    for p, ln in zip(params, layer_names, strict=True):
        o = param_name[id(p)][2]
        first[ln] = min(o, first.get(ln, o))
    ordered = sorted(first, key=first.__getitem__)
    index = {ln: j for j, ln in enumerate(ordered)}
    layers = [LayerInfo(ln) for ln in ordered]
    layer_of: list[int] = []
    for p, ln in zip(params, layer_names, strict=True):
        j = index[ln]
        layer_of.append(j)
        info = layers[j]
        info.numel += _numel(p)
        if len(info.params) < MAX_PARAMS_LISTED:
            layer, leaf, _ = param_name[id(p)]
            full = f"{layer}.{leaf}" if leaf else layer
            info.params.append(
                {"name": full, "shape": _shape(p), "dtype": str(p.dtype).replace("torch.", "")}
            )
        else:
            info.more += 1
    return layer_of, layers, coarsened


def _coarsen(layer_names: list[str]) -> list[str]:
    """Cut names to fewer dotted components until at most MAX_LAYERS remain."""
    depth = max(n.count(".") + 1 for n in layer_names)
    names = layer_names
    while depth > 1 and len(set(names)) > MAX_LAYERS:
        depth -= 1
        names = [".".join(n.split(".")[:depth]) for n in layer_names]
    return names


def _shape(p: torch.Tensor) -> list[int]:
    try:
        return [int(s) for s in p.shape]
    except Exception:
        return []


def _numel(p: torch.Tensor) -> int:
    try:
        return int(p.numel())
    except Exception:
        return 0


def optimizer_name(optimizer: Stepped, ns: Mapping[str, object], taken: set[str]) -> str:
    """The user's name for the optimizer (``opt``), else ``optimizer``/``optimizer2``...;
    for a model read at the end of backward, the model's name (``model``, ``model2``...)."""
    if isinstance(optimizer, ModelSource):
        base = optimizer.name
    else:
        for k, v in list(ns.items()):
            if v is optimizer and isinstance(k, str) and not k.startswith("_") and k not in taken:
                return k
        base = "optimizer"
    n = 1
    name = base
    while name in taken:
        n += 1
        name = f"{base}{n}"
    return name
