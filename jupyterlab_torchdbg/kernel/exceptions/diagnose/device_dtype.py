"""Device mismatches: name the object on the odd device and say how to move that one.

The objects that took part (``involved``) are counted by device; the minority is the
odd one out (``odd_one_out``), and the remedy moves it with the method its kind needs:
a tensor ``.to(device)``, a module ``model.to(device)``, a meta model ``to_empty`` and
its weights, optimizer state by loading it after the model moved. Meta never wins: a
meta tensor has no data, so it is what has to change. A model on an accelerator wins
over data on cpu whatever the count: ``model.to('cuda')`` was deliberate, leaving the
batch on cpu was not. Dtype mismatches are in ``dtype``.
"""

from __future__ import annotations

import re
import sys

from ..summarize.object_parts import named_parameters
from ..summarize.tensor_meta import read_meta
from .context import MAX_WALK, Context, Diagnosis, Row, describe, first_match, shape_text
from .dtype import dtype_mismatch
from .involved import code_path, collapse, involved
from .odd_one_out import group_text, join, majority, model_value, sentence, split

__all__ = ["device_mismatch", "dtype_mismatch"]

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
_HINT = (
    "Define `device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')` "
    "once and use `.to(device)` for the model and for every batch."
)


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


def _device_of(c: Row) -> str | None:
    ds = _devices_of(c)
    return ds[0] if len(ds) == 1 else None


def _cpu_scalar(c: Row) -> bool:
    """A 0-dim cpu tensor joins tensors on any device (an optimizer's ``step``): it is no
    evidence of where things belong."""
    return c.get("kind") == "tensor" and c.get("device") == "cpu" and c.get("shape") == []


def _same_device(a: str, b: str) -> bool:
    """``cuda`` in a message matches ``cuda:0`` in metadata."""
    return a == b or a.split(":")[0] == b or b.split(":")[0] == a


def _accelerator(d: str | None) -> bool:
    return d is not None and d.split(":")[0] not in ("cpu", "meta")


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

    items = [c for c in involved(ctx) if _devices_of(c) and not _cpu_scalar(c)]
    items = collapse(
        items,
        lambda child, mod: _device_of(mod) is not None and _device_of(child) == _device_of(mod),
    )
    devices = list(dict.fromkeys(d for c in items for d in _devices_of(c)))
    all_devices = list(dict.fromkeys([*devices, *msg_devices]))
    spread = next((c for c in items if c["kind"] == "module" and len(_devices_of(c)) > 1), None)
    if spread is not None:
        d = _spread_model(ctx, spread, items)
    elif len(devices) >= 2:
        d = odd_device(items)
    else:
        d = _unseen_device(items, devices, msg_devices)
    hints = d.setdefault("hints", [])
    if isinstance(hints, list):  # (the rules make a list)
        hints.append(_HINT)
    facts = d.get("facts", {})
    d["facts"] = {"devices": all_devices, **(facts if isinstance(facts, dict) else {})}
    return {"category": "device_mismatch", "title": "Device mismatch", **d}


def odd_device(items: list[Row]) -> Diagnosis:
    """Two or more devices among the objects: the minority is the odd one out."""
    counts: dict[str, int] = {}
    for c in items:
        d = _device_of(c)
        if d is not None:
            counts[d] = counts.get(d, 0) + 1
    model = model_value(items, _device_of)
    win = majority(counts, model=model, never=("meta",), rank=lambda v: not _accelerator(v))
    if _accelerator(model) and win == "cpu":
        win = str(model)  # data left on cpu beside a model on the accelerator
    odd = split(items, _device_of, win)
    rest = [c for c in items if c not in odd]
    odd_v = join(list(dict.fromkeys(str(_device_of(c)) for c in odd)))
    hints = []
    if win == "cpu" and any(_accelerator(_device_of(c)) for c in odd):
        mods = [c for c in rest if c["kind"] == "module" and c.get("named", True)]
        accel = next(str(_device_of(c)) for c in odd if _accelerator(_device_of(c)))
        if mods:
            hints.append(
                f"To run on {accel} instead, move the model there: "
                f"`{code_path(str(mods[0]['name']))}.to('{accel}')`."
            )
    head = sentence(odd, rest, odd_v, win, noun="parameters", on="on ")
    opts = {c.get("_optimizer") for c in odd}
    if len(opts) == 1 and None not in opts:
        # Optimizer state of many parameters reads as one object: "the exp_avg state".
        keys = join(list(dict.fromkeys(f"`{c.get('_state_key')}`" for c in odd)))
        head = f"The {keys} state of `{opts.pop()}` is on {odd_v}; its parameters are on {win}"
    return {
        "headline": head,
        "culprits": odd + rest,
        "remedy": _moves(odd, win),
        "hints": hints,
        "facts": {"target_device": win, "odd": [c.get("name") for c in odd]},
    }


def _moves(odd: list[Row], to: str) -> str:
    """How to move each odd object to ``to``, by kind: one sentence each."""
    out = [_move(c, to) for c in odd[:3]]
    if len(odd) > 3:
        out.append(f"Do the same for the other {len(odd) - 3}.")
    return " ".join(dict.fromkeys(out))


def _move(c: Row, to: str) -> str:
    """``to``: a device, or "device" when the right one is not known (then the code
    names a ``device`` variable)."""
    dev = _device_of(c)
    name = str(c.get("name"))
    code = "device" if to == "device" else f"'{to}'"
    where = "`device`" if to == "device" else to
    if c["kind"] == "module":
        m = code_path(name) if c.get("named", True) and name != "self" else "model"
        if dev == "meta":
            return (
                f"Materialise `{m}` on {where}: `{m}.to_empty(device={code})`, then load its "
                f"weights (`{m}.load_state_dict(...)`) or initialise them; a model on meta "
                "has no data to move."
            )
        return f"Move the model: `{m}.to('{to}')`."
    if c.get("_state_of") is not None:
        opt = c.get("_optimizer", "optimizer")
        owner = code_path(str(c["_state_of"]).split(".")[0])
        return (
            f"The state of `{opt}` is on {dev}, its parameters on {to}: move `{owner}` to "
            f"{to} before `{opt}.load_state_dict(...)` (it puts each state on its "
            f"parameter's device), and load the checkpoint with "
            f"`torch.load(path, map_location='{to}')`."
        )
    kept = c.get("_kept_as")
    if isinstance(kept, dict):
        name, holder = str(kept["name"]), kept.get("_holder")
    else:
        holder = c.get("_holder")
    if not c.get("named", True):
        return f"Move {describe(c)} to {to} with `.to('{to}')` where it is made."
    if c.get("_attribute") or (isinstance(kept, dict) and kept.get("_attribute")):
        attr = name.rsplit(".", 1)[-1]
        return (
            f"`{name}` is a plain attribute, which `.to(device)` on its module does not "
            f"move: register it as a buffer in `__init__` (`self.register_buffer('{attr}', "
            f"...)`), made on {to} or moved with the model."
        )
    if c.get("type") == "Parameter" and "." in name and "[" not in name:
        m = code_path(name.rsplit(".", 1)[0])
        return f"Move the model that holds `{name}`: `{m}.to('{to}')`."
    if dev == "meta":
        dtype = c.get("dtype")
        made = f"torch.ones({shape_args(c)}"
        made += f", dtype=torch.{dtype}" if isinstance(dtype, str) else ""
        return (
            f"Create `{name}` on {where} instead: a tensor on meta has no data to move "
            f"(e.g. `{name} = {made}, device={code})`, with the values it should hold)."
        )
    text = f"Move `{name}` to {to}: `{name} = {name}.to('{to}')`"
    if isinstance(holder, str) and name.startswith(f"{holder}['"):
        text += (
            f", or the whole batch: `{holder} = {{k: v.to('{to}') for k, v in {holder}.items()}}`"
        )
    return text + "."


def _spread_model(ctx: Context, model: Row, items: list[Row]) -> Diagnosis:
    """One model over several devices: name its parameters on the odd device(s)."""
    ds = _devices_of(model)
    odd_params, common = _odd_parameters(ctx, model, ds)
    inputs = {_device_of(c) for c in items if c["kind"] == "tensor" and c.get("named", True)}
    inputs.discard(None)
    inputs.discard("meta")
    target = inputs.pop() if len(inputs) == 1 else (common if common != "meta" else "cpu")
    subs = list(dict.fromkeys(str(p["name"]).rsplit(".", 1)[0] for p in odd_params))
    name = str(model["name"])
    head = f"{describe(model)} is spread over {' and '.join(ds)}"
    if subs and odd_params:
        where = join([f"`{s}`" for s in subs[:3]])
        head += f": {where} {'are' if len(subs) > 1 else 'is'} on {odd_params[0]['device']}"
    if odd_params and odd_params[0]["device"] == "meta":
        sub = code_path(subs[0])
        remedy = (
            f"`{subs[0]}` has no data on meta: materialise it with "
            f"`{sub}.to_empty(device='{target}')`, then load its weights or call "
            f"`{sub}.reset_parameters()`."
        )
        if common not in (None, target):
            remedy += f" Then move the model: `{code_path(name)}.to('{target}')`."
    else:
        remedy = f"Move the whole model to {target}: `{code_path(name)}.to('{target}')`."
    named = {str(p["name"]) for p in odd_params}
    others = [
        c
        for c in items
        if c is not model
        and c.get("name") not in named
        and not str(c.get("name")).startswith(f"{name}.")
    ]
    return {
        "headline": head,
        "culprits": [model, *odd_params, *others],
        "remedy": remedy,
        "facts": {"target_device": target, "odd": [p["name"] for p in odd_params]},
    }


def _odd_parameters(ctx: Context, module: Row, devices: list[str]) -> tuple[list[Row], str | None]:
    """Parameters of a multi-device model that sit on its less common device(s), and its
    most common device."""
    model = ctx.resolve_row(module)
    if model is None:
        return [], None
    by_device: dict[str, list[str]] = {}
    torch = sys.modules.get("torch")
    if torch is None:
        return [], None
    for path, p in named_parameters(model, MAX_WALK):  # no user code (R54)
        by_device.setdefault(str(read_meta(p, torch, ("device",))["device"]), []).append(path)
    if len(by_device) < 2:
        return [], None
    common = majority({d: len(v) for d, v in by_device.items()}, never=("meta",))
    out: list[Row] = []
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
    return out, common


def _unseen_device(items: list[Row], devices: list[str], msg_devices: list[str]) -> Diagnosis:
    """Every object seen is on one device: the other operand was not in a frame (made
    inside the library, or held in an attribute); say which device it was on."""
    others = [d for d in msg_devices if not devices or not _same_device(d, devices[0])]
    if items:
        who, many = group_text(items, noun="parameters", rest=False)
        head = f"{who} {'are' if many else 'is'} on {devices[0]}"
        if others:
            head += f", but the operation also used a tensor on {' and '.join(others)}"
        elif devices == ["meta"]:
            head += ", which holds no data to copy"
    else:
        shown = " and ".join(msg_devices) if msg_devices else "different devices"
        head = f"Tensors on {shown} were mixed in one operation"
    target = devices[0] if devices and devices[0] != "meta" else None
    if target is None:
        target = next((d for d in msg_devices if _accelerator(d)), None)
        target = target or ("cpu" if "cpu" in msg_devices else None)
    on_meta = [c for c in items if _device_of(c) == "meta"]
    if on_meta:
        remedy = _moves(on_meta, target or "device")
    elif "meta" in others:
        remedy = (
            "A tensor or model on meta has no data: create it on a real device, or "
            "materialise a meta model with `model.to_empty(device=...)` and load its weights."
        )
    elif target is not None:
        remedy = (
            f"Find the tensor on {join(others) or 'the other device'} (an attribute, a "
            f"buffer or a tensor made inside the function) and create or move it to {target} "
            f"with `.to('{target}')`."
        )
    else:
        remedy = "Move the model and every input to one device with `.to(device)`."
    return {
        "headline": head,
        "culprits": items,
        "remedy": remedy,
        "facts": {"target_device": target},
    }


def shape_args(c: Row) -> str:
    """``2, 8`` for a tensor of shape [2, 8] (a factory call's arguments)."""
    shape = c.get("shape")
    return shape_text(shape).strip("[]") if isinstance(shape, list) else "..."
