"""Where a frame's code comes from (a cell, a user file, a library) and its shown name.

Library files are those under the interpreter's prefixes and site-packages (cached per
file name); cells are recognised through the ``CellMap``. Shown names never reveal a
home directory (S6): cells as ``Cell In[N]``, library files relative to their
``sys.path`` entry, user files relative to the working directory.
"""

from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig
from typing import TYPE_CHECKING

from ..cells import CellMap, CellRun
from ..summarize import safe_text

if TYPE_CHECKING:
    from ....protocol.messages import ExceptionFrameOrigin as Origin

#: Where a frame's code lives (the protocol's ``ExceptionFrame.origin``).

_LIB_CACHE: dict[str, bool] = {}


@functools.cache
def _library_prefixes() -> tuple[str, ...]:
    paths: set[str] = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            paths.add(sysconfig.get_paths()[key])
        except Exception:
            pass
    try:
        paths.update(site.getsitepackages())
    except Exception:
        pass
    try:
        paths.add(site.getusersitepackages())
    except Exception:
        pass
    paths.update({sys.prefix, sys.base_prefix, sys.exec_prefix})
    return tuple(os.path.join(os.path.abspath(p), "") for p in paths if p)


def _is_library(filename: str) -> bool:
    hit = _LIB_CACHE.get(filename)
    if hit is None:
        if filename.startswith("<"):  # <frozen runpy>, <string>
            hit = True
        else:
            hit = os.path.abspath(filename).startswith(_library_prefixes())
        if len(_LIB_CACHE) > 10_000:
            _LIB_CACHE.clear()
        _LIB_CACHE[filename] = hit
    return hit


def origin_of(filename: str, cells: CellMap | None) -> Origin:
    if cells is not None and cells.is_cell_file(filename):
        return "cell"
    if filename.startswith("<ipython-input-"):
        return "cell"
    return "library" if _is_library(filename) else "file"


def display_file(filename: str, origin: str, run: CellRun | None) -> str:
    """A short name that reveals no home directory (S6)."""
    if origin == "cell":
        count = getattr(run, "execution_count", None)
        return f"Cell In[{count}]" if count is not None else "Cell"
    if filename.startswith("<"):
        return safe_text(filename, 200)[0]
    path = os.path.abspath(filename)
    if origin == "library":
        best = ""
        for entry in sys.path:
            if not entry:
                continue
            e = os.path.join(os.path.abspath(entry), "")
            if path.startswith(e) and len(e) > len(best):
                best = e
        if best:
            return safe_text(path[len(best) :], 300)[0]
    rel = relative_to_cwd(path)
    if rel is not None:
        return safe_text(rel, 300)[0]
    parts = path.split(os.sep)
    return safe_text(os.path.join("…", *parts[-3:]), 300)[0]


def relative_to_cwd(path: str) -> str | None:
    try:
        cwd = os.path.join(os.getcwd(), "")
    except Exception:
        return None
    return path[len(cwd) :] if path.startswith(cwd) else None
