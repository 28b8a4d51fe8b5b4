"""Who a worker process is: its rank in the job and the job it belongs to.

Taken from torch.distributed's own state when the process group is initialized (the
usual case: a worker says hello at its first optimizer step, after
``init_process_group``), else the environment torchrun and ``env://`` set (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``), else the index ``torch.multiprocessing.spawn`` gave the
process (mp_wrap.py), else rank 0 of 1. Never imports torch: it reads
``torch.distributed`` only if the process imported it.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..wire.messages import Identity, Launcher

LAUNCHERS = ("spawn", "fork", "torchrun", "attach")


class Origin:
    """How this process came to be a worker (set by the paths that make it one)."""

    #: The index ``torch.multiprocessing.spawn`` / ``start_processes`` gave it.
    spawn_index: int | None = None
    #: Forked from the kernel (or from a forked worker).
    forked = False
    #: ``jupyterlab_torchdbg.attach()`` called explicitly.
    attached = False


def launcher() -> Launcher:
    if Origin.attached:
        return "attach"
    if Origin.forked:
        return "fork"
    if Origin.spawn_index is not None:
        return "spawn"
    return "torchrun"


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _dist() -> tuple[int, int] | None:
    """(rank, world size) from an initialized default process group, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:
        return None
    return None


def identity() -> Identity:
    """The ``RankIdentity`` of this process now (cheap: called about once a second)."""
    spawn = Origin.spawn_index
    local = _env_int("LOCAL_RANK")
    group = _dist()
    if group is not None:
        rank, world = group
    elif (env_rank := _env_int("RANK")) is not None:
        rank, world = env_rank, _env_int("WORLD_SIZE") or env_rank + 1
    elif spawn is not None:
        rank, world = spawn, spawn + 1  # the world size is known once the group is up
    else:
        rank, world = 0, 1
    if local is None and spawn is not None:
        local = spawn
    rank = min(max(rank, 0), 65535)
    return {
        "rank": rank,
        "world_size": min(max(world, rank + 1, 1), 65536),
        "local_rank": local if local is None or local >= 0 else None,
        "host": socket.gethostname()[:256],
        "pid": os.getpid(),
        "launcher": launcher(),
    }


def job_key(world_size: int) -> str:
    """What groups the ranks of one world: the rendezvous address, torchelastic's run
    id, or (mp.spawn / fork from one notebook) the parent process."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if addr and port:
        return f"{addr}:{port}:{world_size}"
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id:
        return f"torchelastic:{run_id}"
    return f"ppid:{os.getppid()}"
