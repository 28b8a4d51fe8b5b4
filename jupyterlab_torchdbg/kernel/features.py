"""The capability modules attached when the extension loads.

Each module named here exposes ``attach(ext: Extension) -> Callable[[], None] | None``:
it registers its hooks, actions and IPython events and returns a cleanup that removes
them (or registers cleanups with ``ext.add_cleanup``). A module must not import torch at
import time; torch-dependent parts use ``ext.on_torch``.
"""

from __future__ import annotations

FEATURE_MODULES: list[str] = [
    "jupyterlab_torchdbg.kernel.exceptions",
    "jupyterlab_torchdbg.kernel.grads",
    "jupyterlab_torchdbg.kernel.memory",
    "jupyterlab_torchdbg.kernel.control",
]
