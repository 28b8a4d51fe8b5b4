"""What took part in the failing operation: the tensors and modules the device and dtype
rules count to find the odd one out.

Taking part means: named on the failing expression (``model(x, mask)``, and the entries
of a ``batch`` dict or list named there), an argument of the library frames that raised,
up to the module whose forward raised (``Linear.forward``: ``self`` and ``input``), and
the module whose own ``forward`` is the failing frame (its ``self``). Other locals are
left out on purpose: a notebook's namespace holds tensors that have nothing to do with
the error, and counting them could outvote the objects that do.

A tensor with no variable of its own is named, when it can be, by where the user keeps
it: an entry of a dict or list (``batch['mask']``), a parameter's gradient
(``model.fc.weight.grad``), an optimizer's state (``opt.state[model.fc.weight]
['exp_avg']``). Those are found by identity through exact builtin containers and
torch's own attributes: no tensor data is read and no user code runs (R21).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator

from ..summarize import Classifier, summarize
from ..summarize.object_parts import instance_dict, named_modules, part
from .context import (
    MAX_WALK,
    Context,
    Row,
    as_culprit,
    frame_row,
    frame_rows,
    inner_library,
    name_for,
    user_frames,
)

#: Entries read per dict/list, library frames read per operation.
MAX_ENTRIES = 256
MAX_FRAMES = 64

_KINDS = ("tensor", "module")


def involved(ctx: Context) -> list[Row]:
    """Culprit rows (tensors and modules) that took part, each object once, the ones
    named on the failing expression first."""
    found: list[Row] = []
    seen: set[object] = set()

    def add(c: Row) -> None:
        key = c.get("_id", ("name", c.get("name")))
        if key not in seen:
            seen.add(key)
            found.append(c)

    cls = Classifier()
    if ctx.focus is not None:
        frame = ctx.frames[ctx.focus]
        for name in ctx.mentioned:
            r = frame_row(frame, name)
            if r is None or name == "self":  # named below, as the user knows it
                continue
            if r.get("kind") in _KINDS:
                add(as_culprit(r, ctx.focus))
            elif r.get("kind") == "container":
                for c in _entries(ctx, r, ctx.focus, cls):
                    add(c)
        s = frame_row(frame, "self")
        if s is not None and s.get("kind") == "module":
            named = name_for(ctx, s.get("_id"))
            role = f"`self` of `{frame.get('function', '?')}`"
            add(as_culprit(s, ctx.focus, role=role, **_named(named)))
    op, unnamed_from = _operation_frames(ctx)
    wanted = {c.get("_id") for c in found}
    wanted.update(r.get("_id") for i in op for r in _with_items(frame_rows(ctx.frames[i])))
    try:
        kept = _where_kept(ctx, wanted)
    except Exception:  # a container changed under us: names are a bonus, counting is not
        kept = {}
    for i in op:
        for r in _with_items(frame_rows(ctx.frames[i])):
            if r.get("kind") not in _KINDS or r.get("_id") in seen:
                continue
            named = name_for(ctx, r.get("_id"))
            if named is None and i != unnamed_from and r.get("_id") not in kept:
                continue  # an intermediate of a decomposition, not an operand
            arg = str(r.get("name"))
            role = f"`{arg}` of `{ctx.frames[i].get('function', '?')}`"
            where = named[1] if named else i
            add(as_culprit(r, where, arg=arg, role=role, **_named(named)))
    for c in found:
        place = kept.get(c.get("_id"))
        if place is None or c.get("kind") != "tensor":
            continue
        if not c.get("named", True):
            c.update(place)
        elif place["name"] != c.get("name"):
            # `attention_mask` in a forward is `batch['attention_mask']` in the cell:
            # the fix belongs where the batch is made.
            c["_kept_as"] = place
    return found


def _with_items(rows: list[Row]) -> Iterator[Row]:
    """A frame's rows and the tensors summarised inside its ``args`` tuples: a wrapper's
    ``args`` still holds ``self.scale`` where the op below sees only its broadcast."""
    for r in rows:
        yield r
        items = r.get("items") if r.get("kind") == "container" else None
        if isinstance(items, list):
            for n, item in enumerate(items):
                if isinstance(item, dict):
                    yield {**item, "name": f"{r.get('name')}[{n}]"}


def _named(named: tuple[str, int | None] | None) -> dict[str, object]:
    return {"name": named[0], "named": True} if named is not None else {"named": False}


def _operation_frames(ctx: Context) -> tuple[list[int], int | None]:
    """Library frames of the failing operation, innermost first, up to the module whose
    forward raised; and the one frame whose unnamed tensors count too (that module's
    ``forward``, else the outermost frame of the operation holding tensors: the API the
    user called, whose arguments are the operands)."""
    inner = inner_library(ctx)[:MAX_FRAMES]
    out: list[int] = []
    layer = None
    for i in inner:
        out.append(i)
        if (frame_row(ctx.frames[i], "self") or {}).get("kind") == "module":
            layer = i
            break
    if layer is not None:
        return out, layer
    with_tensors = [
        i
        for i in out
        if any(r.get("kind") in _KINDS for r in _with_items(frame_rows(ctx.frames[i])))
    ]
    return out, (with_tensors[-1] if with_tensors else None)


def _entries(ctx: Context, row: Row, frame: int, cls: Classifier) -> Iterator[Row]:
    """Tensor and module entries of an exact dict, list or tuple named on the failing
    expression (``model(**batch)``), named ``batch['mask']``."""
    holder = ctx.resolve_row(row)
    for key, value in _items(holder):
        if cls.kind(value) not in _KINDS:
            continue
        r = {"name": f"{row['name']}[{key}]", **summarize(value, cls)}
        yield as_culprit(r, frame, named=True, _holder=str(row["name"]))


def _items(holder: object) -> Iterator[tuple[str, object]]:
    """(key as code, value) of an exact dict/list/tuple; other types are not read (their
    ``__getitem__`` could be user code)."""
    if type(holder) is dict:
        for n, (k, v) in enumerate(dict.items(holder)):
            if n >= MAX_ENTRIES:
                return
            if type(k) is str and len(k) <= 80:
                yield str.__repr__(k), v
            elif type(k) is int:
                yield int.__repr__(k), v
    elif type(holder) in (list, tuple):
        for n, v in enumerate(holder[:MAX_ENTRIES]):  # type: ignore[index]
            yield str(n), v


def _where_kept(ctx: Context, wanted: set[object]) -> dict[object, dict[str, object]]:
    """By ``id``: names for tensors that the user keeps in a dict or list, as a
    parameter's gradient, a buffer or attribute of a module, or as optimizer state,
    searched in the user frames (each model walked once); only the ``wanted`` ids."""
    out: dict[object, dict[str, object]] = {}
    user = list(user_frames(ctx))
    rows = [(i, r) for i in user for r in frame_rows(ctx.frames[i])]
    # The user's own names first (`model` in the cell), `self` (inside a forward) last.
    rows.sort(key=lambda x: x[1].get("name") == "self")
    params: dict[int, str] = {}
    for i, r in rows:
        kind = r.get("kind")
        if kind == "container":
            for key, v in _items(ctx.resolve_row(r)):
                if id(v) not in wanted:
                    continue
                place = {"name": f"{r['name']}[{key}]", "named": True, "frame": i}
                out.setdefault(id(v), {**place, "_holder": str(r["name"])})
        elif kind == "module":
            for path, v, how in _module_tensors(ctx.resolve_row(r)):
                if how == "parameter":
                    params.setdefault(id(v), f"{r['name']}.{path}")
                    continue
                if id(v) not in wanted:
                    continue
                place = {"name": f"{r['name']}.{path}", "named": True, "frame": i}
                if how == "attribute":
                    place["_attribute"] = True
                out.setdefault(id(v), place)
    done: set[object] = set()
    for i in [*user, *inner_library(ctx)]:
        for r in frame_rows(ctx.frames[i]):
            if r.get("kind") == "optimizer" and r.get("_id") not in done:
                done.add(r.get("_id"))
                out.update(_optimizer_state(ctx, r, i, params, wanted))
    return out


def _module_tensors(model: object) -> Iterator[tuple[str, object, str]]:
    """(path, tensor, how) for the gradients, buffers and plain tensor attributes of a
    user model: a tensor kept as ``self.scale = torch.ones(3)`` is not moved by
    ``model.to(device)``, the classic one left behind. ``__dict__`` and ``_buffers`` are
    read only as exact dicts."""
    if model is None:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # .grad of a non-leaf attribute warns
            for path, m in named_modules(model, MAX_WALK):  # no user code (R54)
                d = instance_dict(m)
                if d is None:
                    continue
                prefix = f"{path}." if path else ""
                params = d.get("_parameters")
                for k, p in dict.items(params) if type(params) is dict else ():
                    if p is None:
                        continue
                    yield f"{prefix}{k}", p, "parameter"
                    # Only exact tensors: a subclass's `.grad` can run __torch_function__.
                    g = p.grad if type(p) in _exact() else None
                    if g is not None:
                        yield f"{prefix}{k}.grad", g, "grad"
                bufs = d.get("_buffers")
                for k, b in dict.items(bufs) if type(bufs) is dict else ():
                    if b is not None:
                        yield f"{prefix}{k}", b, "buffer"
                for k, v in dict.items(d):
                    if type(k) is str and not k.startswith("_") and _is_tensor(v):
                        yield f"{prefix}{k}", v, "attribute"
    except Exception:
        return


def _is_tensor(v: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and issubclass(type(v), torch.Tensor)  # no __class__ read


def _exact() -> tuple[type, ...]:
    torch = sys.modules.get("torch")
    return (torch.Tensor, torch.nn.Parameter) if torch is not None else ()


def _optimizer_state(
    ctx: Context, row: Row, frame: int, params: dict[int, str], wanted: set[object]
) -> dict[object, dict[str, object]]:
    """``opt.state[<param>]['exp_avg']`` for the state tensors of an optimizer, with the
    parameter named as the user knows it (``params``: by ``id``, from the user models).
    ``state`` is read only as a ``dict`` (torch's ``defaultdict``), by ``dict`` methods."""
    opt = ctx.resolve_row(row)
    state = part(opt, "state")
    if (
        not issubclass(type(state), dict)
        or type(state).__module__ not in ("collections", "builtins")
        or not isinstance(state, dict)  # (true by now: decided by the type, no user code)
    ):
        return {}
    own = name_for(ctx, row.get("_id"))
    opt_name = own[0] if own else str(row.get("name"))
    out: dict[object, dict[str, object]] = {}
    for n, (param, entries) in enumerate(dict.items(state)):
        if n > MAX_WALK or type(entries) is not dict:
            break
        for key, v in _items(entries):
            if id(v) not in wanted:
                continue
            pname = params.get(id(param))
            p_text = code_path(pname) if pname else "<param>"
            out[id(v)] = {
                "name": f"{opt_name}.state[{p_text}][{key}]",
                "named": True,
                "frame": own[1] if own and own[1] is not None else frame,
                "_state_of": pname,
                "_optimizer": opt_name,
                "_state_key": key.strip("'"),
            }
    return out


def code_path(name: str) -> str:
    """A dotted name as Python: ``model.2.weight`` -> ``model[2].weight``."""
    parts = name.split(".")
    out = parts[0]
    for p in parts[1:]:
        out += f"[{p}]" if p.isdigit() else f".{p}"
    return out


def collapse(items: list[Row], same: Callable[[Row, Row], bool]) -> list[Row]:
    """Drop a parameter or submodule (``model.fc.weight``) whose module (``model``) is in
    the list and tells the same (``same(child, module)``): one object, one vote."""
    mods = [c for c in items if c.get("kind") == "module" and c.get("named", True)]
    out = []
    for c in items:
        name = str(c.get("name"))
        parent = next(
            (m for m in mods if m is not c and name.startswith(f"{m.get('name')}.")), None
        )
        if parent is not None and same(c, parent):
            continue
        out.append(c)
    return out
