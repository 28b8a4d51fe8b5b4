"""jupyterlab_torchdbg: a live debugging panel for PyTorch training in JupyterLab.

This module is imported by the Jupyter server to find the lab extension, so it stays
cheap: no torch, no kernel-side code until ``%load_ext jupyterlab_torchdbg`` or a call
to the public API below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .package_version import __version__

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch.nn import Module
    from torch.optim import Optimizer

    from .kernel.host import Shell
    from .kernel.watches import WatchHandle

__all__ = [
    "__version__",
    "attach",
    "load_ipython_extension",
    "log",
    "ranks_env",
    "unload_ipython_extension",
    "watch",
]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyterlab_torchdbg"}]


def load_ipython_extension(ipython: Shell) -> None:
    """``%load_ext jupyterlab_torchdbg``: register the comm target and the hooks."""
    from .kernel.extension import load

    load(ipython)


def unload_ipython_extension(ipython: object) -> None:
    """``%unload_ext jupyterlab_torchdbg``: remove every hook, handler and comm."""
    from .kernel.extension import unload

    unload(ipython)


def attach(endpoint: str | None = None, key: str | None = None) -> bool:
    """Report this process to a notebook's panel as a rank of a multi-process job.

    For a training script started outside the notebook (another terminal, another
    host): ``jupyterlab_torchdbg.attach()`` before training, with ``TORCHDBG_ENDPOINT``
    and ``TORCHDBG_KEY`` copied from the notebook's kernel (``os.environ`` there), or
    passed here. Processes the notebook starts itself (mp.spawn, fork, ``!torchrun``)
    attach without it. Lazy: nothing connects before the first optimizer step; rank,
    world size and host come from torch.distributed. Never imports torch itself and
    never raises into training; returns False without an endpoint.
    """
    from .ranks.worker.entry import attach as _attach

    return _attach(endpoint, key)


def ranks_env(host: str | None = None) -> dict[str, str]:
    """What to export on another host so that its ranks attach to this kernel's panel.

    In the notebook's kernel, with the extension loaded and listening on TCP
    (``TORCHDBG_LISTEN=0.0.0.0:PORT`` in the kernel's environment before ``%load_ext``):
    ``TORCHDBG_ENDPOINT`` (as other hosts reach it: ``host``, else this machine's name,
    where the kernel listens on every interface), ``TORCHDBG_KEY``, ``TORCHDBG_JOB_ID``
    and ``PYTHONPATH`` with the boot directory (for the same install path on every host).
    A dict; ``print(ranks_env())`` prints it as ``export`` lines for a job script. The
    key is a secret: keep those lines out of shared files. Raises ``RuntimeError`` when
    there is no TCP endpoint, saying what to set.
    """
    from .ranks.kernel.remote_env import ranks_env as _ranks_env

    return _ranks_env(host)


def log(*step: object, **values: object) -> None:
    """Record scalar series for the live chart: ``log(loss=loss, acc=acc)``.

    Values may be real numbers (any ``int``, ``bool``, ``float``, ``Decimal``,
    ``Fraction``, numpy scalars) or one-element tensors of any real dtype on any device
    (device values are copied to the host once per flush, not per call). NaN and ±Inf
    are recorded as such; an int too large for a float (``10**400``) as ±Inf. Complex
    values, tensors of other sizes, meta tensors, None, strings and other objects are
    skipped with a warning (at most 20 warnings per kernel, then one "suppressed" line).
    An optional positional ``step`` sets the x value (``log(step, loss=loss)``); one that
    is not a finite number on the host is ignored with a warning, as are further
    positional values. The values may also come as one dict, after the step if any:
    ``log(step, metrics)`` (as ``wandb.log``); the cheapest form for many values, since
    CPython rebuilds a ``**metrics`` dict of 400 names on every call (keywords given as
    well win over the dict's; a key that is not a str is logged as ``str(key)``). Names
    longer than 512 characters are cut to 500 plus ``…#`` and a 10-digit hash. A no-op
    when the extension is not loaded; never raises into the training loop (R42).
    """
    (_log_values or _import_log_values())(step, values)


#: ``kernel.scalars.log_values`` once ``log`` was first called (an import statement per
#: call costs ~15 µs on a cold cache; the kernel side is not imported before).
_log_values: Callable[[tuple[object, ...], dict[str, object]], None] | None = None


def _import_log_values() -> Callable[[tuple[object, ...], dict[str, object]], None]:
    global _log_values
    from .kernel.scalars import log_values

    _log_values = log_values
    return log_values


def watch(
    model: Module,
    optimizer: Optimizer | None = None,
    *,
    stride: int | None = None,
    skip_nonfinite: bool = False,
    rerun_forward: bool = False,
) -> WatchHandle:
    """Monitor ``model``'s gradients at each optimizer step; returns a removable handle.

    Without ``watch()`` every optimizer is monitored once the extension is loaded, with
    names taken from the models in the notebook's namespace. ``watch()`` names a model
    explicitly and limits monitoring to the watched models; ``optimizer`` limits it to
    that optimizer's steps; ``stride=N`` samples every N steps (default: automatic, at
    most 1% of the step time); ``skip_nonfinite=True`` skips optimizer steps whose
    gradients hold NaN/Inf, so the weights stay finite; ``rerun_forward=True`` lets the
    tool re-run the model's forward on a copy of a non-finite step's batch without a
    click even when it is not torch's own code (its side effects outside the model and
    the notebook's namespace are not undone). ``handle.remove()`` or ``with
    watch(model): ...`` ends it. The model and optimizer are held by weakref only.
    """
    from .kernel.grads.api import watch as _watch

    return _watch(
        model,
        optimizer,
        stride=stride,
        skip_nonfinite=skip_nonfinite,
        rerun_forward=rerun_forward,
    )
