"""Notice ``import torch`` as it happens, even in the middle of a cell.

Users often import torch and train in the same cell; waiting for the next cell boundary
would miss that whole run. A meta-path finder wraps the loader of the top-level ``torch``
package so that, once ``torch/__init__`` has finished executing, a callback runs. It never
imports anything itself, leaves every other import alone, and removes itself after firing
or on unload.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType


class TorchImportWatcher(importlib.abc.MetaPathFinder):
    def __init__(self, on_import: Callable[[], None]) -> None:
        self._on_import = on_import
        self._busy = False

    def install(self) -> Callable[[], None]:
        sys.meta_path.insert(0, self)
        return self.remove

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch" or self._busy:
            return None
        self._busy = True
        try:
            # Ask the other finders (we are skipped while busy).
            spec = importlib.util.find_spec(fullname)
        except Exception:
            return None
        finally:
            self._busy = False
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or loader is None or exec_module is None:
            return None

        def exec_and_notify(module: ModuleType) -> None:
            exec_module(module)  # errors propagate to the user's import, unchanged
            self.remove()
            self._on_import()

        loader.exec_module = exec_and_notify
        return spec
