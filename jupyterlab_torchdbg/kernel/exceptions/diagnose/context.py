"""What the rules read: the captured frames (summaries), and helpers to find variables,
library-frame arguments and user-visible names in them.

Rules read summaries (plain dicts) and, through ``Context.resolve``, the live objects of
summarised locals while the capture runs, by identity only: to find a module's dotted
name inside a user model (``model.fc2``), the parameter on an odd device, and where the user
keeps an unnamed operand (an entry of a dict or list, a module attribute or buffer, a
gradient, an optimizer state entry: ``batch['x']``, ``opt.state[p]['exp_avg']``).
Nothing here reads tensor data or touches CUDA (R22, R23).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..summarize.object_parts import named_modules, named_parameters

if TYPE_CHECKING:
    pass

#: Modules searched for a dotted name / parameters visited, per user model.
MAX_WALK = 20_000

Row = dict[str, object]
Diagnosis = dict[str, object]

LOSS_FUNCS = ("cross_entropy", "nll_loss", "nll_loss2d", "nll_loss_nd")
LOSS_TYPES = ("CrossEntropyLoss", "NLLLoss")


@dataclass
class Context:
    exc_type: str
    exc_module: str
    message: str
    frames: list[dict[str, object]]
    focus: int | None
    #: Identifiers of the failing expression in the focus frame, in source order.
    mentioned: list[str] = field(default_factory=list)
    resolve: Callable[[int], object] = field(default=lambda _id: None)
    #: Largest named tensors on a device type ("cuda"/"cpu") in user frames (OOM only).
    scan_tensors: Callable[[str], list[Row]] = field(default=lambda _dev: [])
    #: (type, message) of chained exceptions and group members, tried when the raised
    #: exception itself is not recognised.
    others: list[tuple[str, str]] = field(default_factory=list)

    def resolve_row(self, row: Row) -> object:
        """The live object a row summarises; None for a row without an ``_id``."""
        obj_id = row.get("_id")
        return self.resolve(obj_id) if isinstance(obj_id, int) else None


def frame_rows(frame: dict[str, object]) -> list[Row]:
    rows = frame.get("locals")
    return rows if isinstance(rows, list) else []


def frame_row(frame: dict[str, object], name: str) -> Row | None:
    return next((r for r in frame_rows(frame) if r.get("name") == name), None)


def user_frames(ctx: Context) -> Iterator[int]:
    """User frames, the focus frame first, then outward."""
    if ctx.focus is None:
        return
    for i in range(ctx.focus, -1, -1):
        if ctx.frames[i].get("user"):
            yield i


def inner_library(ctx: Context) -> list[int]:
    """Library frames below the focus frame, innermost first."""
    start = -1 if ctx.focus is None else ctx.focus
    return [i for i in range(len(ctx.frames) - 1, start, -1) if not ctx.frames[i].get("user")]


def mentioned_rows(ctx: Context, kinds: tuple[str, ...] = ("tensor", "module")) -> list[Row]:
    """Rows of the focus frame named on the failing expression, in source order."""
    if ctx.focus is None:
        return []
    frame = ctx.frames[ctx.focus]
    out = []
    for name in ctx.mentioned:
        r = frame_row(frame, name)
        if r is not None and r.get("kind") in kinds:
            out.append(as_culprit(r, ctx.focus))
    return out


def as_culprit(row: Row, frame: object, **extra: object) -> Row:
    """``row`` as a culprit in frame ``frame`` (an index; None: none, a row's own passes)."""
    c = {k: v for k, v in row.items() if k != "items"}
    if frame is not None:
        c["frame"] = frame
    c.update(extra)
    return c


def library_frame(
    ctx: Context, *, self_types: tuple[str, ...] = (), functions: tuple[str, ...] = ()
) -> int | None:
    """The innermost library frame whose ``self`` has one of ``self_types`` (a module's
    forward: it knows the layer), else the innermost whose function is in ``functions``."""
    inner = inner_library(ctx)
    for i in inner:
        s = frame_row(ctx.frames[i], "self")
        if s is not None and s.get("type") in self_types:
            return i
    for i in inner:
        if ctx.frames[i].get("function") in functions:
            return i
    return None


def name_for(ctx: Context, obj_id: object) -> tuple[str, int | None] | None:
    """A user-visible name for the object with ``id == obj_id``: a variable in a user
    frame, else a dotted path inside a user model (``model.fc2``, ``model.fc2.weight``)."""
    if not isinstance(obj_id, int):
        return None
    # The user's own names first (`net` in the cell), `self` (inside a forward) last.
    rows = [(i, r) for i in user_frames(ctx) for r in frame_rows(ctx.frames[i])]
    rows = [x for x in rows if x[1].get("name") != "self"] + [
        x for x in rows if x[1].get("name") == "self"
    ]
    for i, r in rows:
        if r.get("_id") == obj_id:
            return str(r["name"]), i
    for i, r in rows:
        if r.get("kind") != "module":
            continue
        path = _path_in_module(ctx.resolve_row(r), obj_id)
        if path is not None:
            return f"{r['name']}.{path}", i
    return None


def _path_in_module(model: object, obj_id: int) -> str | None:
    if model is None:
        return None
    # From the modules' own dicts: an overridden named_modules() never runs (R54).
    for path, m in named_modules(model, MAX_WALK):
        if id(m) == obj_id and path:
            return path
    for path, p in named_parameters(model, MAX_WALK):
        if id(p) == obj_id:
            return path
    return None


def library_args(ctx: Context, frame: int, kinds: tuple[str, ...] = ("tensor",)) -> list[Row]:
    """Rows of a library frame (tensors by default), named as the user knows them.

    Each culprit has ``arg`` (the parameter name in the library function) and ``named``
    (true when ``name`` is the user's own variable, false when it is just ``arg``).
    """
    out = []
    fn = ctx.frames[frame].get("function", "?")
    for r in frame_rows(ctx.frames[frame]):
        if r.get("kind") not in kinds:
            continue
        arg = str(r.get("name"))
        named = name_for(ctx, r.get("_id"))
        role = f"`{arg}` of `{fn}`"
        if named is not None:
            out.append(as_culprit(r, named[1], name=named[0], arg=arg, named=True, role=role))
        else:
            out.append(as_culprit(r, frame, arg=arg, named=False, role=role))
    return out


def describe(c: Row) -> str:
    """How a culprit reads in a headline: its user name, or "`input` of `forward`"."""
    return f"`{c['name']}`" if c.get("named", True) else str(c.get("role", c.get("name")))


def user_name_or(c: Row | None, fallback: str) -> str:
    """The user variable in backticks, else ``fallback`` (never an invented name)."""
    if c is not None and c.get("named", True):
        return f"`{c['name']}`"
    return fallback


def shape_text(shape: object) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]" if isinstance(shape, list) else "n/a"


def ints_in(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", text)]


def first_match(patterns: list[str], text: str) -> re.Match[str] | None:
    for p in patterns:
        m = re.search(p, text)
        if m is not None:
            return m
    return None


def layer_label(ctx: Context, frame: int) -> tuple[str, Row | None]:
    """How to call the module ``self`` of a library frame: ``model.fc2`` or its class."""
    s = frame_row(ctx.frames[frame], "self")
    if s is None:
        return "the layer", None
    named = name_for(ctx, s.get("_id"))
    return (f"`{named[0]}` ({s['type']})" if named else f"a {s['type']} layer"), s


def n_classes(input_row: Row | None) -> int | None:
    shape = input_row.get("shape") if input_row else None
    if not isinstance(shape, list) or not shape:
        return None
    n = shape[1] if len(shape) >= 2 else shape[0]
    return n if isinstance(n, int) else None
