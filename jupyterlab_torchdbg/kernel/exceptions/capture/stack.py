"""Walking a traceback and choosing which of its frames to send (R09).

The walk is bounded (a deeper stack is marked truncated); IPython's own ``run_code``
frames at the top are skipped as its traceback does, and so are this package's own
entry frames (a rank's ``mp.spawn`` wrapper: never the user's code); runs of an
identical frame (plain recursion) and the middle of a very deep stack are elided, each
gap recorded with its size and reason.
"""

from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, TypedDict

from .bounds import Limits


@dataclass
class StackEntry:
    tb: TracebackType
    key: tuple[str, int, str]


def walk(tb: TracebackType | None, cap: int) -> tuple[list[StackEntry], bool]:
    out: list[StackEntry] = []
    while tb is not None:
        if len(out) >= cap:
            return out, False
        code = tb.tb_frame.f_code
        out.append(StackEntry(tb, (code.co_filename, tb.tb_lineno or 0, code.co_name)))
        tb = tb.tb_next
    return out, True


def _ipython_shell_file() -> str | None:
    mod = sys.modules.get("IPython.core.interactiveshell")
    f = getattr(mod, "__file__", None)
    return f if isinstance(f, str) else None


#: This package's directory: a frame of ours at the top of a stack is our wrapper.
_OWN_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
    "",
)


def skip_ipython_prefix(entries: list[StackEntry]) -> list[StackEntry]:
    """Drop IPython's own ``run_code`` frame(s) at the top, as its traceback does, and
    this package's wrapper frames (``ranks/worker/mp_wrap.py`` around a rank's function)."""
    shell_file = _ipython_shell_file()
    i = 0
    while i < len(entries) - 1 and (
        (shell_file and entries[i].key[0] == shell_file)
        or os.path.abspath(entries[i].key[0]).startswith(_OWN_DIR)
    ):
        i += 1
    return entries[i:] if i else entries


class Gap(TypedDict):
    """Frames left out after the kept frame at ``after_pos`` (a position in the stack)."""

    after_pos: int
    count: int
    reason: Literal["repeated", "limit"]


def elide(entries: list[StackEntry], limits: Limits) -> tuple[list[int], list[Gap]]:
    """Positions of frames to send and the gaps between them.

    Runs of an identical frame (same file, line, function: plain recursion) keep their
    first ``repeats``; if more than ``frames`` remain, the outermost ``head`` and the
    innermost rest are kept. Each gap is ``{after_pos, count, reason}``.
    """
    n = len(entries)
    kept: list[int] = []
    i = 0
    while i < n:
        j = i
        while j + 1 < n and entries[j + 1].key == entries[i].key:
            j += 1
        kept.extend(range(i, min(j + 1, i + limits.repeats)))
        i = j + 1
    if n and kept[-1] != n - 1:
        kept.append(n - 1)  # the frame that raised is always shown (and is the focus)
    if len(kept) > limits.frames:
        tail = limits.frames - limits.head
        kept = kept[: limits.head] + kept[-tail:]
    elided: list[Gap] = []
    for a, b in itertools.pairwise(kept):
        if b - a > 1:
            key = entries[a].key
            repeated = all(entries[k].key == key for k in range(a + 1, b))
            elided.append(
                {"after_pos": a, "count": b - a - 1, "reason": "repeated" if repeated else "limit"}
            )
    return kept, elided
