"""Boot hook for processes the notebook starts (on PYTHONPATH while the extension is loaded).

Python imports ``sitecustomize`` at interpreter start. This one:

1. runs the next ``sitecustomize`` on ``sys.path`` (the one this shadows, if any), as
   the interpreter would have;
2. does nothing more unless ``TORCHDBG_ENDPOINT`` is set;
3. never imports torch, nor this package: a meta-path finder waits for the process's
   own ``import torch`` and, once ``torch/__init__`` has run, hands over to
   ``jupyterlab_torchdbg.ranks.worker.entry.torch_imported`` (the step hooks call a lazy
   worker from then on; nothing connects before the first optimizer step).

Stdlib modules the interpreter has loaded already, no ``typing`` (annotations are never
evaluated): well under a millisecond in processes that never import torch.
Nothing here raises into the interpreter's start or the user's import.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from _collections_abc import Sequence


def _chain() -> None:
    """Execute the ``sitecustomize`` this one shadows (later on sys.path), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    me = sys.modules.get("sitecustomize")
    module = type(sys)("sitecustomize")
    module.__file__ = spec.origin
    module.__spec__ = spec
    module.__loader__ = spec.loader
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.stderr.write(f"Error in sitecustomize ({spec.origin}): {type(e).__name__}: {e}\n")
    finally:
        if me is not None:
            sys.modules["sitecustomize"] = me


class _TorchWatch:
    """Calls the worker entry once ``import torch`` has finished (then removes itself)."""

    def __init__(self) -> None:
        self.busy = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch" or self.busy:
            return None
        self.busy = True
        spec: importlib.machinery.ModuleSpec | None = None
        try:
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        except Exception:
            return None
        finally:
            self.busy = False
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or loader is None or exec_module is None:
            return None
        watch = self

        def exec_and_notify(module: object) -> None:
            exec_module(module)  # the user's import: errors propagate unchanged
            watch.remove()
            try:
                from jupyterlab_torchdbg.ranks.worker.entry import torch_imported

                torch_imported()
            except Exception:
                pass

        loader.exec_module = exec_and_notify
        return spec

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def _boot() -> None:
    try:
        _chain()
    except Exception:
        pass
    if not os.environ.get("TORCHDBG_ENDPOINT") or "torch" in sys.modules:
        return
    sys.meta_path.insert(0, _TorchWatch())


_boot()
