"""Is some thread inside a given function? (``sys._current_frames``, with the GIL held.)

Used before changing torch's hook dicts, which torch iterates without a lock: the step
boundary (step_boundary.py) and the end-of-backward hooks (backward_boundary.py) change
them only when no thread is inside an optimizer step or a backward pass.
"""

from __future__ import annotations

import gc
import sys
from types import FrameType

MAX_STACK = 100_000  # frames looked at per thread (all)


def any_thread_inside(co_name: str, filename: str) -> bool:
    """Some thread (this one too) runs the function ``co_name`` of ``filename``.

    The garbage collector is off while ``sys._current_frames`` runs: it holds the
    interpreter's thread-list lock while it allocates frame objects, and a collection
    started there that frees a ``threading.local`` (the comm hub of an earlier load)
    takes the same lock again, deadlocking the kernel (CPython gh-106883, 3.11; seen in
    tests/test_hook_lifecycle.py's reload storm). Called with the GIL held throughout.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        frames = sys._current_frames()
    finally:
        if enabled:
            gc.enable()
    for frame in frames.values():
        f: FrameType | None = frame
        depth = 0
        while f is not None and depth < MAX_STACK:
            code = f.f_code
            if code.co_name == co_name and code.co_filename == filename:
                return True
            f = f.f_back
            depth += 1
    return False
