"""Which thread steps which optimizer, and so what this thread may safely read (R34).

Training may run on several threads (each with its own model and optimizer). Another
thread may be inside ``backward()`` at any moment, writing ``p.grad`` of its parameters:
reading that from here is a data race inside torch that can crash the process. The
breakdown and the OOM autopsy ask ``readable()`` which objects this thread may read.

A load or reload while a thread already trains (R41) must not read that thread's
gradients before this load saw it step: the threads seen stepping are remembered by the
process (``_TRAINING``, across loads), and a thread other than this one that is running
torch's autograd, optimizer or module code (its stack, read in one stretch,
thread_stacks.py) counts as training too.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Threads other than the main one seen stepping an optimizer, by any load.
_TRAINING: set[int] = set()


class StepThreads:
    def __init__(self) -> None:
        self._optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        #: The thread that last stepped each optimizer.
        self._owner: weakref.WeakKeyDictionary[torch.optim.Optimizer, int] = (
            weakref.WeakKeyDictionary()
        )
        #: Threads other than the main one that step optimizers.
        self._threads: set[int] = set()

    def saw(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer`` just stepped on this thread (the step boundary, training thread)."""
        tid = threading.get_ident()
        try:
            if optimizer not in self._optimizers:
                self._optimizers.add(optimizer)
            if self._owner.get(optimizer) != tid:
                self._owner[optimizer] = tid
        except TypeError:
            pass  # an optimizer without weakref support is found by name only (R24)
        if tid not in self._threads and tid != threading.main_thread().ident:
            self._threads.add(tid)
            _TRAINING.add(tid)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """Every optimizer seen stepping that is still alive."""
        return list(self._optimizers)

    def readable(self) -> Callable[[object], bool] | None:
        """None while training runs on the main thread only (everything may be read);
        otherwise what this thread may read: its own optimizers and their parameters.
        Threads that ended no longer count."""
        me = threading.get_ident()
        alive = {t.ident for t in threading.enumerate()}
        self._threads = (self._threads | _TRAINING) & alive  # (this one too: see saw())
        _TRAINING.intersection_update(alive)
        if not self._threads and not _other_thread_in_torch():
            return None
        mine: set[int] = set()
        for opt, tid in list(self._owner.items()):
            if tid == me:
                mine.add(id(opt))
                for g in getattr(opt, "param_groups", []):
                    mine.update(id(p) for p in g.get("params", []))
        return lambda obj: id(obj) in mine


def _other_thread_in_torch() -> bool:
    """Another thread runs torch's autograd, optimizer or module code now."""
    import os

    torch_mod = sys.modules.get("torch")
    root = os.path.dirname(getattr(torch_mod, "__file__", None) or "")
    if not root:
        return False
    from ..thread_stacks import other_thread_in

    dirs = ("autograd", "optim", os.path.join("nn", "modules"), "_tensor.py")
    return other_thread_in(tuple(os.path.join(root, d) for d in dirs))
