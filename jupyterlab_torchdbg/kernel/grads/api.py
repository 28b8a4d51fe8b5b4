"""``watch(model, optimizer=None, *, stride=None, skip_nonfinite=False,
rerun_forward=False)``: name and scope what is monitored.

Without any ``watch()`` every optimizer is monitored and its parameters are named through
the ``nn.Module``s in the notebook's namespace. ``watch()`` is for when that is not enough:
a model kept inside a dict or a trainer object, one model of several, or a fixed stride.

In a rank of a multi-process job the notebook follows (ranks/worker/), the rank's layers
are named by the same plan (naming.py), so ``watch()`` there names and scopes what the rank
reports; its stride and the non-finite options are the notebook kernel's only (a rank's
sampling is set by the job, ranks/worker/boundary.py).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import TYPE_CHECKING

from ..extension import current
from ..watches import WatchHandle, add_watch
from .action_args import MAX_FIXED_STRIDE

if TYPE_CHECKING:
    from torch.nn import Module
    from torch.optim import Optimizer

_warned = False


def watch(
    model: Module,
    optimizer: Optimizer | None = None,
    *,
    stride: int | None = None,
    skip_nonfinite: bool = False,
    rerun_forward: bool = False,
) -> WatchHandle:
    """Monitor ``model``'s gradients (at ``optimizer``'s steps, or any optimizer's).

    ``stride``: sample every N optimizer steps (1 = every step); None picks it
    automatically so the monitor costs at most 1% of the step time. ``skip_nonfinite``:
    an optimizer step whose gradients hold NaN/Inf is skipped, so the weights stay finite
    (every step is then checked; on CUDA that is one small host sync per step).
    ``rerun_forward``: the model's forward may be re-run on a copy of the batch at a
    non-finite step to find where the NaN starts, even though it is not torch's own
    (its attributes, tensors and the RNGs are put back afterwards, but not other side
    effects of its code: files, other modules' state). Returns a handle:
    ``handle.remove()`` stops watching, and ``with watch(model): ...`` watches for the
    block. Holds the model and optimizer by weakref only. Loads the extension in an
    IPython kernel if it is not loaded yet. A model no optimizer steps (a loop updating
    its weights by hand) is read at the end of each of its backward passes instead.
    """
    if not callable(getattr(model, "named_parameters", None)):
        raise TypeError(f"watch() needs an nn.Module, got {type(model).__name__}")
    if optimizer is not None and not isinstance(getattr(optimizer, "param_groups", None), list):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    if stride is not None:
        if isinstance(stride, bool) or not isinstance(stride, int):
            raise TypeError("stride must be a whole number or None (automatic)")
        if not 1 <= stride <= MAX_FIXED_STRIDE:
            raise ValueError(f"stride must be between 1 and {MAX_FIXED_STRIDE}")
    if not isinstance(skip_nonfinite, bool):
        raise TypeError("skip_nonfinite must be True or False")
    if not isinstance(rerun_forward, bool):
        raise TypeError("rerun_forward must be True or False")
    handle = add_watch(model, optimizer, stride, skip_nonfinite, rerun_forward)
    if current() is None:
        _load_or_warn()
    ext = current()
    if ext is not None:
        # A model updated by hand is read at the end of its backward passes from now on,
        # not only from the next cell (it never raises into the cell, R11).
        ext.scan_models()
    return handle


def _load_or_warn() -> None:
    global _warned
    shell = None
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:
        shell = None
    if shell is not None and getattr(shell, "kernel", None) is not None:
        from ..extension import load

        load(shell)
        return
    if _in_a_rank():
        return  # the rank's worker reads the watch at its next plan (reader.py)
    if not _warned:
        _warned = True
        warnings.warn(
            "jupyterlab_torchdbg is not loaded (run %load_ext jupyterlab_torchdbg in a "
            "notebook); the watch takes effect once it is.",
            RuntimeWarning,
            stacklevel=3,
        )


def _in_a_rank() -> bool:
    """Whether this process is a rank the notebook follows: started with the kernel's
    endpoint in its environment, or attached by ``attach()`` (read without importing the
    ranks package)."""
    if os.environ.get("TORCHDBG_ENDPOINT"):
        return True
    activation = sys.modules.get("jupyterlab_torchdbg.ranks.worker.activation")
    current_worker = getattr(activation, "current", None)
    return callable(current_worker) and current_worker() is not None
