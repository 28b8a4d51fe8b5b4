"""An object's own parts read without running its code (R21, R54): its instance dict, a
module's submodules, parameters and buffers.

``obj.__dict__`` runs a property if the class defines one named ``__dict__``, and
``model.parameters()`` / ``named_modules()`` run whatever a subclass overrides them with
(FSDP's wrappers do, a user model may). Here the instance dict is taken through the
standard ``__dict__`` slot descriptor of ``object`` / the class (a C getter) and only when
it is an exact ``dict``; a module's parts are read from its ``_modules``, ``_parameters``
and ``_buffers`` dicts, walked in ``named_modules`` order, each object once, bounded.
"""

from __future__ import annotations

import types
from collections.abc import Iterator

_TYPE_DICT = type.__dict__["__dict__"]
_TYPE_MRO = type.__dict__["__mro__"]


def instance_dict(obj: object) -> dict[str, object] | None:
    """``obj``'s own ``__dict__`` if it is an exact dict read by the standard descriptor,
    else None. Never runs a property, ``__getattr__`` or ``__getattribute__`` of ``obj``."""
    tp = type(obj)
    desc = _DICT_SLOT.get(tp, _UNSEEN)
    if desc is _UNSEEN:
        desc = _dict_slot(tp)
        if len(_DICT_SLOT) > 10_000:
            _DICT_SLOT.clear()
        _DICT_SLOT[tp] = desc
    if type(desc) is not types.GetSetDescriptorType:  # None: no standard slot
        return None
    try:
        d = desc.__get__(obj)
    except Exception:
        return None
    return d if type(d) is dict else None


_UNSEEN = object()
#: Per type: the standard ``__dict__`` slot descriptor its instances use, or None.
_DICT_SLOT: dict[type, types.GetSetDescriptorType | None] = {}


def _dict_slot(tp: type) -> types.GetSetDescriptorType | None:
    try:
        for klass in _TYPE_MRO.__get__(tp):
            desc = _TYPE_DICT.__get__(klass).get("__dict__")
            if desc is None:
                continue
            # a class that redefines __dict__ (a property) is not read
            return desc if type(desc) is types.GetSetDescriptorType else None
    except Exception:
        return None
    return None


def part(obj: object, name: str) -> object:
    """One entry of ``obj``'s instance dict (None when absent or unreadable)."""
    d = instance_dict(obj)
    return dict.get(d, name) if d is not None else None


def _entries(obj: object, name: str) -> list[tuple[str, object]]:
    d = part(obj, name)
    if type(d) is not dict:
        return []
    return [(k, v) for k, v in dict.items(d) if type(k) is str and v is not None]


def named_modules(model: object, limit: int) -> Iterator[tuple[str, object]]:
    """``(path, module)`` as ``model.named_modules()`` yields them (the root as ``""``),
    from the ``_modules`` dicts, each module once, at most ``limit``."""
    for path, m, _ in _walk(model, limit):
        yield path, m


def _walk(model: object, limit: int) -> Iterator[tuple[str, object, dict[str, object] | None]]:
    """``(path, module, its instance dict)``, depth first in ``named_modules`` order."""
    seen: set[int] = set()
    stack: list[tuple[str, object]] = [("", model)]
    n = 0
    while stack and n < limit:
        path, m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        n += 1
        d = instance_dict(m)
        yield path, m, d
        children = d.get("_modules") if d is not None else None
        if type(children) is not dict:
            continue
        for name, child in reversed(dict.items(children)):
            if type(name) is str and child is not None:
                stack.append((f"{path}.{name}" if path else name, child))


def module_tensors(model: object, limit: int) -> Iterator[tuple[bool, object]]:
    """``(is_parameter, tensor)`` for every parameter, then buffer, of each module in one
    walk; each object once, at most ``limit`` in all."""
    seen: set[int] = set()
    for _, _, d in _walk(model, limit):
        if d is None:
            continue
        for key, is_param in (("_parameters", True), ("_buffers", False)):
            entries = d.get(key)
            if type(entries) is not dict:
                continue
            for t in dict.values(entries):
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                if len(seen) > limit:
                    return
                yield is_param, t


def named_parameters(model: object, limit: int) -> Iterator[tuple[str, object]]:
    """``(path, parameter)`` as ``model.named_parameters()`` yields them, each once, at
    most ``limit``, from the ``_parameters`` dicts."""
    return _named_entries(model, "_parameters", limit)


def named_buffers(model: object, limit: int) -> Iterator[tuple[str, object]]:
    """``(path, buffer)`` from the ``_buffers`` dicts, each once, at most ``limit``."""
    return _named_entries(model, "_buffers", limit)


def _named_entries(model: object, attr: str, limit: int) -> Iterator[tuple[str, object]]:
    """``(path, tensor)`` of every module's ``attr`` dict, each tensor once, at most
    ``limit``."""
    seen: set[int] = set()
    for prefix, m in named_modules(model, limit):
        for name, t in _entries(m, attr):
            if id(t) in seen:
                continue
            seen.add(id(t))
            if len(seen) > limit:
                return
            yield (f"{prefix}.{name}" if prefix else name), t
