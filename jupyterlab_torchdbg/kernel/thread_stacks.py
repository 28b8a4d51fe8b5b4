"""Threads' stacks: is some thread inside a given function, and a thread's stack as text.

``any_thread_inside`` (``sys._current_frames``, with the GIL held) is used before
changing torch's hook dicts, which torch iterates without a lock: the step boundary
(step_boundary.py) and the end-of-backward hooks (backward_boundary.py) change them only
when no thread is inside an optimizer step or a backward pass.

``stack_lines`` / ``user_first``: a stuck rank's training-thread stack (ranks/worker/agent.py,
ranks/kernel/alarms.py), each frame marked as the user's or not, the user's listed first.
"""

from __future__ import annotations

import gc
import linecache
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType

MAX_STACK = 100_000  # frames looked at per thread (all)


def any_thread_inside(co_name: str, filename: str, starting: FrameType | None = None) -> bool:
    """Some thread (this one too) runs the function ``co_name`` of ``filename``, other
    than in the frame ``starting`` (a call of it that has not started its work yet)."""

    def match(f: FrameType, me: bool) -> bool:
        code = f.f_code
        return code.co_name == co_name and code.co_filename == filename and f is not starting

    return _scan(match)


def other_thread_in(prefixes: tuple[str, ...]) -> bool:
    """Some thread other than this one runs code of a file under one of ``prefixes``."""
    return _scan(lambda f, me: not me and f.f_code.co_filename.startswith(prefixes))


def _scan(match: Callable[[FrameType, bool], bool]) -> bool:
    """Whether a frame of some thread matches (``me``: the frame is this thread's).

    The whole walk is one stretch without a thread switch (switch interval raised) and
    without a collection: CPython 3.11 crashed walking ``f_back`` of another thread's
    frames while that thread ran on (seen in tests/test_r41_module_hooks.py's reload
    storm), and ``sys._current_frames`` holds the interpreter's thread-list lock while it
    allocates frame objects, where a collection that frees a ``threading.local`` (the
    comm hub of an earlier load) takes the same lock again and deadlocks (CPython
    gh-106883, 3.11). No frame object is kept after the stretch. Nothing in the walk
    releases the GIL.
    """
    old = sys.getswitchinterval()
    enabled = gc.isenabled()
    sys.setswitchinterval(1.0)
    gc.disable()
    me = threading.get_ident()
    try:
        frames = sys._current_frames()
        frame: FrameType | None = None
        try:
            for tid, frame in frames.items():
                f: FrameType | None = frame
                depth = 0
                while f is not None and depth < MAX_STACK:
                    if match(f, tid == me):
                        return True
                    f = f.f_back
                    depth += 1
            return False
        finally:
            # ``frame`` too: left on this thread's own top frame, it is a cycle (that
            # frame holds itself) keeping the whole stack and its locals alive until a
            # collection, e.g. a forward's output when a hook is removed inside a forward.
            f = frame = None
            frames.clear()
    finally:
        if enabled:
            gc.enable()
        sys.setswitchinterval(old)


#: This package's directory: its frames (a rank's mp.spawn wrapper, a pause's hold) are
#: the tool's, shown with the library's.
_OWN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")


def stack_lines(frame: FrameType | None, limit: int) -> tuple[list[str], list[bool]]:
    """A thread's stack from ``frame`` outwards, outermost first (at most ``limit``
    frames, the innermost kept): ``"file:line in function: code"`` per frame, with the
    file as the exception view shows it (relative to its ``sys.path`` entry or the
    working directory, never a home directory), and whether each frame is the user's
    (a cell or a user file; not the standard library, an installed package or this
    tool). Reads code objects and source lines only."""
    from .exceptions.capture.origin import display_file, origin_of

    lines: list[str] = []
    user: list[bool] = []
    f = frame
    while f is not None and len(lines) < limit:
        code = f.f_code
        name = code.co_filename
        origin = origin_of(name, None)
        if origin == "file" and os.path.abspath(name).startswith(_OWN_DIR):
            origin = "library"
        src = linecache.getline(name, f.f_lineno).strip()
        shown = display_file(name, origin, None)
        lines.append(f"{shown}:{f.f_lineno} in {code.co_name}: {src}"[:500])
        user.append(origin != "library")
        f = f.f_back
    del f
    lines.reverse()
    user.reverse()
    return lines, user


def user_first(lines: list[str], user: list[bool]) -> tuple[list[str], int]:
    """The user's frames first (outermost first), then the library's (outermost first),
    and how many are the user's: a stuck rank's stack read as the exception view reads a
    traceback, with the tool's and torch's frames after (issue #22)."""
    if len(user) != len(lines):
        return list(lines), 0
    mine = [ln for ln, u in zip(lines, user, strict=True) if u]
    theirs = [ln for ln, u in zip(lines, user, strict=True) if not u]
    return mine + theirs, len(mine)
