"""What kind of value a local is (tensor, module, number, ...), by its exact type.

The kind picks the row's summarizer and ranks rows in the locals table. Types are
compared against the torch and numpy classes found in ``sys.modules``: a kernel that
never imported torch never imports it here.
"""

from __future__ import annotations

import sys

# Kinds, in the order the locals table prefers them.
TENSOR, MODULE, OPTIMIZER, DATASET, DATALOADER = (
    "tensor",
    "module",
    "optimizer",
    "dataset",
    "dataloader",
)
ARRAY, NUMBER, STRING, BYTES, NONE, CONTAINER = (
    "array",
    "number",
    "string",
    "bytes",
    "none",
    "container",
)
OBJECT, FUNCTION, CLASS, PYMODULE = "object", "function", "class", "pymodule"

RANK = {
    TENSOR: 1,
    MODULE: 1,
    OPTIMIZER: 1,
    DATASET: 1,
    DATALOADER: 1,
    ARRAY: 2,
    NUMBER: 2,
    STRING: 2,
    BYTES: 3,
    NONE: 3,
    CONTAINER: 2,
    OBJECT: 3,
    FUNCTION: 4,
    CLASS: 4,
    PYMODULE: 4,
}

#: Kinds left out of a module-level (notebook namespace) frame: imports, defs, classes.
NAMESPACE_NOISE = frozenset({FUNCTION, CLASS, PYMODULE})


class Classifier:
    """Maps a value to a kind by its exact type, caching per type for one capture.

    The torch and numpy classes are taken from ``sys.modules``: a kernel that never
    imported torch never imports it here.
    """

    def __init__(self) -> None:
        self._cache: dict[type, str] = {}
        torch = sys.modules.get("torch")
        self.torch = torch
        self._tensor = getattr(torch, "Tensor", None)
        nn = getattr(torch, "nn", None)
        self._module = getattr(nn, "Module", None)
        optim = getattr(torch, "optim", None)
        self._optimizer = getattr(optim, "Optimizer", None)
        data = sys.modules.get("torch.utils.data")
        self._dataset = getattr(data, "Dataset", None)
        self._dataloader = getattr(data, "DataLoader", None)
        numpy = sys.modules.get("numpy")
        self.numpy = numpy
        self._ndarray = getattr(numpy, "ndarray", None)
        self._npgeneric = getattr(numpy, "generic", None)

    def kind(self, value: object) -> str:
        tp = type(value)
        k = self._cache.get(tp)
        if k is None:
            k = self._cache[tp] = self._kind_of_type(tp)
        return k

    def _kind_of_type(self, tp: type) -> str:
        import types

        if tp is type(None):
            return NONE
        if tp in (bool, int, float, complex):
            return NUMBER
        if tp is str:
            return STRING
        if tp in (bytes, bytearray):
            return BYTES
        if tp in (list, tuple, dict, set, frozenset):
            return CONTAINER
        if tp is types.ModuleType:
            return PYMODULE
        if tp in (
            types.FunctionType,
            types.BuiltinFunctionType,
            types.MethodType,
            types.BuiltinMethodType,
        ):
            return FUNCTION
        try:
            if issubclass(tp, type):
                return CLASS
            for base, kind in (
                (self._tensor, TENSOR),
                (self._module, MODULE),
                (self._optimizer, OPTIMIZER),
                (self._dataloader, DATALOADER),
                (self._dataset, DATASET),
                (self._ndarray, ARRAY),
            ):
                if base is not None and issubclass(tp, base):
                    return kind
            if self._npgeneric is not None and issubclass(tp, self._npgeneric):
                return NUMBER
        except Exception:  # a metaclass with a broken __subclasscheck__
            return OBJECT
        return OBJECT


def rank(kind: str) -> int:
    return RANK.get(kind, 3)
