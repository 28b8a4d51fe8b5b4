"""The ways into worker mode that need both the process state and mp's ``_wrap``:
the boot sitecustomize's ``torch_imported`` and the public ``attach()``."""

from __future__ import annotations

import os

from ..wire import transport as wire
from . import activation, mp_wrap
from .identity import Origin


def torch_imported() -> None:
    """The boot sitecustomize saw ``import torch`` finish in a process that inherited
    the endpoint: the step hooks call this process's worker; mp's ``_wrap`` is patched
    before a spawned rank's Process object is unpickled."""
    activation.activate(then=mp_wrap.patch)


def attach(endpoint: str | None = None, key: str | None = None) -> bool:
    """``jupyterlab_torchdbg.attach()``: this process (a script started elsewhere) is a
    rank of the notebook's job. The endpoint goes into ``os.environ`` too, so the
    processes it starts (mp.spawn, fork) attach as well. False without an endpoint."""
    endpoint = endpoint or os.environ.get(wire.ENDPOINT_ENV)
    key = key or os.environ.get(wire.KEY_ENV)
    if not endpoint or not key:
        return False
    os.environ[wire.ENDPOINT_ENV] = endpoint
    os.environ[wire.KEY_ENV] = key
    Origin.attached = True
    return activation.activate(endpoint, key, then=mp_wrap.patch) is not None
