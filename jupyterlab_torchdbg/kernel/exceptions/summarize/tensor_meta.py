"""A tensor's metadata read without running any of its subclass's code (R21, R35, R54).

A tensor subclass can run Python on every access: ``__torch_function__`` (called for
``.shape``, ``.numel()``, ...), properties that shadow ``shape`` or ``device``, and a
``__torch_dispatch__`` that torch calls for the sizes of a wrapper subclass built with a
custom size, stride, device or layout policy. A DTensor's methods can run a collective.
So the fields are read through ``torch._C.TensorBase``'s own C getters
(``TensorBase.shape.__get__(t)``: never a property of the subclass, never
``__getattribute__``) with ``__torch_function__`` disabled (the subclass's and any
torch-function mode's) and, for every type other than the exact ``torch.Tensor`` and
``nn.Parameter``, under a dispatch mode that refuses every operator: a read that would
reach the subclass's ``__torch_dispatch__`` raises in the mode first and the field is
"n/a". Nothing here can run user code, so nothing here can block or communicate.

A tensor whose type lives in ``torch.distributed`` (DTensor) is read the same way (its
wrapper holds the global shape as plain metadata) plus its local shard, taken from the
``_local_tensor`` slot through the class's own slot descriptor, when that shard is an exact
``torch.Tensor``.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn

from ...safe_read import NA, dtype_name, json_int

if TYPE_CHECKING:
    from torch import Tensor

#: The fields ``read_meta`` returns, each a value or "n/a".
FIELDS = (
    "shape",
    "dtype",
    "device",
    "layout",
    "requires_grad",
    "is_leaf",
    "grad",
    "version",
    "numel",
    "itemsize",
)


def is_distributed(tp: type) -> bool:
    """The type lives in ``torch.distributed`` (DTensor, a process group, a mesh, ...)."""
    try:
        mod = type.__dict__["__module__"].__get__(tp)
    except Exception:
        return False
    return isinstance(mod, str) and (
        mod == "torch.distributed" or mod.startswith("torch.distributed.")
    )


@functools.cache
def _refuse_mode_class(torch: ModuleType) -> type | None:
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except Exception:
        return None

    class _Refuse(TorchDispatchMode):
        """Every operator refused: a metadata read that would dispatch to Python fails."""

    # Set after the class exists: torch wraps a mode's __torch_dispatch__ in a dynamo
    # guard at class creation, whose first call imports torch._dynamo (over a second).
    _Refuse.__torch_dispatch__ = _refuse  # type: ignore[method-assign]
    return _Refuse


def _refuse(
    self: object, func: object, types: object, args: object = (), kwargs: object = None
) -> NoReturn:
    raise RuntimeError("torchdbg: not dispatched while capturing")


@contextlib.contextmanager
def no_user_code(torch: ModuleType, exact: bool) -> Iterator[bool]:
    """Yields True when reads are safe: ``__torch_function__`` off (a subclass's, and any
    torch-function mode the user left entered: ``set_default_device`` installs one) and,
    for a subclass, every dispatch refused. False when this torch cannot guarantee it."""
    disable = getattr(torch._C, "DisableTorchFunction", None)
    refuse = _refuse_mode_class(torch) if disable is not None and not exact else None
    if disable is None or (refuse is None and not exact):
        yield False
        return
    with disable():
        if refuse is None:
            yield True
            return
        with refuse():
            yield True


def read_meta(t: object, torch: ModuleType, fields: tuple[str, ...] = FIELDS) -> dict[str, object]:
    """The metadata ``fields`` of tensor ``t`` (all of ``FIELDS`` by default), each a
    value or "n/a"."""
    out: dict[str, object] = dict.fromkeys(fields, NA)
    base = getattr(torch._C, "TensorBase", None) or getattr(torch._C, "_TensorBase", None)
    if base is None:
        return out
    readers = _readers(base)
    exact = type(t) in (torch.Tensor, torch.nn.Parameter)
    if exact and not _function_modes_on(torch):  # torch's own C getters: no Python runs
        _read_into(out, readers, t)
        return out
    with no_user_code(torch, exact) as safe:
        if safe:
            _read_into(out, readers, t)
    return out


def _function_modes_on(torch: ModuleType) -> bool:
    """A torch-function mode is entered (its ``__torch_function__`` sees even C getters)."""
    stack_len = getattr(torch._C, "_len_torch_function_stack", None)
    try:
        return stack_len is None or stack_len() > 0
    except Exception:
        return True


def _read_into(
    out: dict[str, object], readers: dict[str, Callable[[object], object]], t: object
) -> None:
    for field in out:
        read = readers.get(field)
        try:
            out[field] = read(t) if read is not None else NA
        except Exception:
            out[field] = NA


@functools.cache
def _readers(base: type) -> dict[str, Callable[[object], object]]:
    """Readers through ``TensorBase``'s own descriptors (C getters and methods)."""
    d = type.__dict__["__dict__"].__get__(base)
    shape, dtype, device, layout = (d[n].__get__ for n in ("shape", "dtype", "device", "layout"))
    requires_grad, is_leaf, grad, version = (
        d[n].__get__ for n in ("requires_grad", "is_leaf", "grad", "_version")
    )
    numel, element_size = d["numel"], d["element_size"]

    def sizes(t: object) -> list[int | str]:
        size = shape(t)
        if not isinstance(size, tuple):  # torch.Size, a C tuple subclass
            raise TypeError
        return [json_int(n) if type(n) is int else NA for n in tuple.__iter__(size)]

    def flag(get: Callable[[object], object]) -> Callable[[object], bool | str]:
        return lambda t: v if type(v := get(t)) is bool else NA

    def count(get: Callable[[object], object]) -> Callable[[object], int | str]:
        return lambda t: json_int(v) if type(v := get(t)) is int else NA

    return {
        "shape": sizes,
        # torch.dtype / device / layout are C types: their str runs no user code
        "dtype": lambda t: dtype_name(dtype(t)),
        "device": lambda t: str(device(t)),
        "layout": lambda t: dtype_name(layout(t)),
        "requires_grad": flag(requires_grad),
        "is_leaf": flag(is_leaf),
        # .grad of a non-leaf is None unless retain_grad() was called; reading it only warns
        "grad": lambda t: grad(t) is not None,
        "version": count(version),
        "numel": count(numel),
        "itemsize": count(element_size),
    }


def local_shard(t: object, torch: ModuleType) -> Tensor | None:
    """A distributed tensor's local shard, when its class keeps one in a ``_local_tensor``
    slot (DTensor) and it is an exact ``torch.Tensor``; else None. Read through the slot's
    own descriptor: no method, property or ``__getattribute__`` of the object runs."""
    try:
        for klass in type.__dict__["__mro__"].__get__(type(t)):
            d = type.__dict__["__dict__"].__get__(klass)
            desc = d.get("_local_tensor")
            if desc is None:
                continue
            if type(desc) is not types.MemberDescriptorType:
                return None
            local = desc.__get__(t)
            return local if type(local) is torch.Tensor else None
    except Exception:
        return None
    return None
