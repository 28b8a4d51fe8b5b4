"""Device and dtype mismatches: name the tensors and modules on each side."""

from __future__ import annotations

import re

from .context import (
    LOSS_FUNCS,
    LOSS_TYPES,
    MAX_WALK,
    Context,
    Diagnosis,
    Row,
    as_culprit,
    describe,
    first_match,
    frame_row,
    inner_library,
    layer_label,
    library_args,
    library_frame,
    mentioned_rows,
    merge_culprits,
    name_for,
    user_name_or,
)

_DEVICE_PATTERNS = [
    r"[Ee]xpected all tensors to be on the same device",
    r"is not on the expected device",
    r"[Ee]xpected (?:object of )?device(?: type)? \S+ but (?:got|found) device",
    r"to have the same device as",
    r"to be on the same device",
    r"indices should be either on cpu or on the same device",
    r"is on (?:CPU|GPU|cpu|cuda\S*), but expected (?:it )?to be on",
    r"should be on the same device",
]
_DEVICE_TOKEN = re.compile(r"\b(cuda:\d+|cuda|cpu|meta|mps|xpu:\d+|xpu|xla:\d+|xla|hpu:\d+|hpu)\b")


def _message_devices(msg: str) -> list[str]:
    found = _DEVICE_TOKEN.findall(msg)
    found += ["cpu" for _ in re.findall(r"\bCPU\b", msg)]
    found += ["cuda" for _ in re.findall(r"\bGPU\b", msg)]
    return list(dict.fromkeys(found))


def _devices_of(c: Row) -> list[str]:
    if c.get("kind") == "tensor":
        d = c.get("device")
        return [d] if isinstance(d, str) and d != "n/a" else []
    ds = c.get("devices")
    return [d for d in ds if isinstance(d, str)] if isinstance(ds, list) else []


def _same_device(a: str, b: str) -> bool:
    """``cuda`` in a message matches ``cuda:0`` in metadata."""
    return a == b or a.split(":")[0] == b or b.split(":")[0] == a


def device_mismatch(ctx: Context) -> Diagnosis | None:
    msg = ctx.message
    type_pair = re.search(
        r"Input type \(torch\.(\w+\.)?\w+\) and weight type \(torch\.(\w+\.)?\w+\)", msg
    )
    conv_devices = None
    if type_pair is not None:
        a = (type_pair.group(1) or "").rstrip(".") or "cpu"
        b = (type_pair.group(2) or "").rstrip(".") or "cpu"
        if a == b:
            return None  # same device: a dtype mismatch, handled there
        conv_devices = [a, b]
    meta_copy = "Cannot copy out of meta tensor" in msg
    if conv_devices is None and not meta_copy and first_match(_DEVICE_PATTERNS, msg) is None:
        return None
    msg_devices = conv_devices or _message_devices(msg)
    if meta_copy and "meta" not in msg_devices:
        msg_devices.append("meta")

    # The layer whose forward raised (Linear.forward: self + input) names the operands
    # best; without one, the innermost library frame's tensors.
    inner = inner_library(ctx)
    layer = next(
        (i for i in inner if (frame_row(ctx.frames[i], "self") or {}).get("kind") == "module"), None
    )
    if layer is None and inner:
        layer = inner[0]
    cands = merge_culprits(
        mentioned_rows(ctx),
        library_args(ctx, layer, ("tensor", "module")) if layer is not None else [],
    )
    cands = [c for c in cands if _devices_of(c)]
    devices = list(dict.fromkeys(d for c in cands for d in _devices_of(c)))
    culprits: list[Row] = []
    parts: list[str] = []
    if len(devices) >= 2:
        for c in cands:
            ds = _devices_of(c)
            if c["kind"] == "module" and len(ds) > 1:
                parts.append(f"{describe(c)} is spread over {' and '.join(ds)}")
                culprits.append(c)
                culprits.extend(_odd_parameters(ctx, c, ds))
            elif c["kind"] == "module":
                parts.append(f"{describe(c)} parameters are on {ds[0]}")
                culprits.append(c)
            else:
                parts.append(f"{describe(c)} is on {ds[0]}")
                culprits.append(c)
        head = "; ".join(parts)
    elif len(devices) == 1:
        others = [d for d in msg_devices if not _same_device(d, devices[0])]
        parts = [
            describe(c) + (" parameters are" if c["kind"] == "module" else " is") for c in cands
        ]
        head = f"{', '.join(parts)} on {devices[0]}"
        if others:
            head += f", but the operation also used a tensor on {' and '.join(others)}"
        culprits = cands
    else:
        shown = " and ".join(msg_devices) if msg_devices else "different devices"
        head = f"Tensors on {shown} were mixed in one operation"
    all_devices = list(dict.fromkeys([*devices, *msg_devices]))
    target = _target_device(culprits, all_devices)
    remedy = _device_remedy(culprits, target, all_devices)
    return {
        "category": "device_mismatch",
        "title": "Device mismatch",
        "headline": head,
        "culprits": culprits,
        "remedy": remedy,
        "hints": [
            "Define `device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')` "
            "once and use `.to(device)` for the model and for every batch."
        ],
        "facts": {"devices": all_devices, "target_device": target},
    }


def _odd_parameters(ctx: Context, module: Row, devices: list[str]) -> list[Row]:
    """Parameters of a multi-device model that sit on its less common device(s)."""
    model = ctx.resolve_row(module)
    if model is None:
        return []
    by_device: dict[str, list[str]] = {}
    try:
        for n, (path, p) in enumerate(model.named_parameters()):
            if n > MAX_WALK:
                break
            by_device.setdefault(str(p.device), []).append(str(path))
    except Exception:
        return []
    if len(by_device) < 2:
        return []
    common = max(by_device, key=lambda d: len(by_device[d]))
    out = []
    for dev, names in by_device.items():
        if dev == common:
            continue
        for path in names[:3]:
            out.append(
                {
                    "name": f"{module['name']}.{path}",
                    "kind": "tensor",
                    "type": "Parameter",
                    "device": dev,
                    "text": f"parameter on {dev} (the rest of `{module['name']}` is on {common})",
                    "role": "odd device",
                }
            )
    return out


def _target_device(culprits: list[Row], devices: list[str]) -> str | None:
    """Where things should go: the model's device if one model is on one real device,
    else the accelerator mentioned."""
    for c in culprits:
        ds = _devices_of(c)
        if c.get("kind") == "module" and len(ds) == 1 and ds[0] != "meta":
            return ds[0]
    accel = [d for d in devices if d not in ("cpu", "meta")]
    if accel:
        return accel[0]
    return "cpu" if "cpu" in devices else None


def _device_remedy(culprits: list[Row], target: str | None, devices: list[str]) -> str:
    if "meta" in devices:
        return (
            "Tensors on the meta device have no data: create the model on a real device, "
            "or materialise it with `model.to_empty(device='cpu')` (or 'cuda') and then "
            "load or initialise its weights."
        )
    if target is None:
        return "Move the model and every input to one device with `.to(device)`."
    moves = [
        f"`{c['name']} = {c['name']}.to('{target}')`"
        for c in culprits
        if c.get("kind") == "tensor"
        and "." not in str(c.get("name"))
        and _devices_of(c)
        and not _same_device(_devices_of(c)[0], target)
        and c.get("named", True)
    ]
    mods = [
        f"`{c['name']}.to('{target}')`"
        for c in culprits
        if c.get("kind") == "module" and any(not _same_device(d, target) for d in _devices_of(c))
    ]
    steps = moves + mods
    if steps:
        return f"Move them to {target}: " + ", ".join(steps) + "."
    return f"Move the model and every input to {target} with `.to('{target}')`."


_DTYPE_NAMES = {
    "double": "float64",
    "float": "float32",
    "half": "float16",
    "bfloat16": "bfloat16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "byte": "uint8",
    "char": "int8",
    "bool": "bool",
    "complexfloat": "complex64",
    "complexdouble": "complex128",
    "float64": "float64",
    "float32": "float32",
    "float16": "float16",
    "int64": "int64",
    "int32": "int32",
}


def _dtype(name: str) -> str | None:
    n = name.lower().removeprefix("torch.").removesuffix("tensor")
    return _DTYPE_NAMES.get(n)


_DTYPE_PATTERNS = [
    r"expected target dtype to be (\w+)(?: or (\w+))?, but got (\w+)",
    r"must have the same dtype, but got (\w+) and (\w+)",
    r"to have the same dtype, but got:? (\w+) != (\w+)",
    r"expected scalar type (\w+) but found (\w+)",
    r"Input type \((\w+)\) and (?:weight|bias) type \((\w+)\) should be the same",
    r"Input type \(torch\.(\w+)\) and weight type \(torch\.(\w+)\) should be the same",
    r"Found dtype (\w+) but expected (\w+)",
    r"result type (\w+) can't be cast to the desired output type (\w+)",
    r"[Ee]xpected object of scalar type (\w+) but got scalar type (\w+)",
    r"expected (?:both vectors|input and target|self and \w+) to have (?:the )?same dtype",
]


def dtype_mismatch(ctx: Context) -> Diagnosis | None:
    m = first_match(_DTYPE_PATTERNS, ctx.message)
    if m is None:
        return None
    named = [d for d in (_dtype(g) for g in m.groups() if g) if d]
    named = list(dict.fromkeys(named))
    loss = library_frame(ctx, self_types=LOSS_TYPES, functions=LOSS_FUNCS)
    if "target dtype" in ctx.message and loss is not None:
        target = next((c for c in library_args(ctx, loss) if c.get("arg") == "target"), None)
        got = named[-1] if named else (target or {}).get("dtype", "n/a")
        who = user_name_or(target, "The target")
        return {
            "category": "dtype_mismatch",
            "title": "Target dtype for the loss",
            "headline": f"{who} is {got}, but "
            f"`{ctx.frames[loss].get('function')}` needs class indices as int64 (Long)",
            "culprits": [target] if target else [],
            "remedy": (
                f"Convert the labels: `{target['name'] if target else 'labels'} = "
                f"{target['name'] if target else 'labels'}.long()`. (Soft labels are "
                "float class probabilities with the same shape as the logits.)"
            ),
            "facts": {"dtypes": named, "expected": "int64"},
        }
    layer = library_frame(
        ctx,
        self_types=("Linear", "Conv1d", "Conv2d", "Conv3d", "Bilinear", "Embedding", "LSTM", "GRU"),
    )
    culprits: list[Row] = []
    if layer is not None:
        name, s = layer_label(ctx, layer)
        args = [c for c in library_args(ctx, layer) if c.get("arg") != "self"]
        layer_dtypes = s.get("dtypes") if s else None
        inp = next((c for c in args if c.get("dtype") not in (layer_dtypes or [])), None)
        if inp is not None and isinstance(layer_dtypes, list) and layer_dtypes:
            who = user_name_or(inp, "The input")
            layer_c = as_culprit(s, layer) if s else None
            named_layer = name_for(ctx, s.get("_id")) if s else None
            if layer_c is not None and named_layer is not None:
                layer_c["name"], layer_c["frame"] = named_layer
            culprits = [inp] + ([layer_c] if layer_c else [])
            return {
                "category": "dtype_mismatch",
                "title": "Dtype mismatch",
                "headline": f"{who} is {inp.get('dtype')}, but {name} has "
                f"{' and '.join(layer_dtypes)} weights",
                "culprits": culprits,
                "remedy": _dtype_remedy(inp, layer_dtypes[0]),
                "hints": [
                    "NumPy arrays are float64 by default: `torch.from_numpy(a).float()`.",
                    "Or convert the model instead: `model.to(torch.float64)`.",
                ],
                "facts": {"dtypes": named, "expected": layer_dtypes[0]},
            }
    cands = [c for c in mentioned_rows(ctx, ("tensor",)) if c.get("dtype") in named]
    if len({c.get("dtype") for c in cands}) >= 2:
        head = "; ".join(f"`{c['name']}` is {c['dtype']}" for c in cands)
        culprits = cands
    else:
        head = (
            f"Tensors of dtype {' and '.join(named)} were mixed in one operation"
            if len(named) >= 2
            else "A tensor has the wrong dtype for this operation"
        )
    return {
        "category": "dtype_mismatch",
        "title": "Dtype mismatch",
        "headline": head,
        "culprits": culprits,
        "remedy": "Convert one side so both match, e.g. `x = x.float()` (float32) or "
        "`x = x.to(other.dtype)`.",
        "hints": ["NumPy arrays are float64 by default: `torch.from_numpy(a).float()`."],
        "facts": {"dtypes": named},
    }


def _dtype_remedy(c: Row, to: str) -> str:
    short = {"float32": "float", "float64": "double", "float16": "half", "int64": "long"}
    name = c.get("name") if c.get("named", True) else "x"
    method = short.get(to)
    conv = f".{method}()" if method else f".to(torch.{to})"
    return f"Convert the input: `{name} = {name}{conv}`."
