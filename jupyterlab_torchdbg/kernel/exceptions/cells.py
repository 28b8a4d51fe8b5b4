"""Which notebook cell a traceback frame came from (R40).

IPython compiles every cell under a file name chosen by its compiler (ipykernel: a hash of
the cell's source under ``/tmp/ipykernel_<pid>/``; plain IPython: ``<ipython-input-N-…>``)
and keeps ``compile._filename_map`` (file name -> execution count). JupyterLab sends the
cell id with every execute request, and ``pre_run_cell`` receives it as ``info.cell_id``.
At ``post_run_cell`` this module records ``file name -> (cell id, execution count)``, so a
frame's ``co_filename`` gives the cell and its ``f_lineno`` the line in that cell.

- Identical code in two cells compiles to one file name: the record is the cell that ran
  it last, which is also the cell whose functions are the live ones.
- A cell edited and re-run compiles to a new file name; a frame still running the old code
  (a function kept from before) maps to the old record, whose cell has since run other
  code: ``source_changed`` is true. An edit that was never run cannot be seen from the
  kernel, so each frame also carries its source line for the panel to compare.
- A deleted cell: the id is sent anyway and the panel says it is gone.
"""

from __future__ import annotations

import os
import sys
from collections import OrderedDict
from dataclasses import dataclass

#: File names remembered (one per distinct cell source that ran).
MAX_CELLS = 10_000


@dataclass(frozen=True)
class CellRun:
    """One execution of a cell's code."""

    filename: str
    execution_count: int | None
    cell_id: str | None


class CellMap:
    def __init__(self, shell: object) -> None:
        """``shell``: IPython's shell; only its ``compile`` is read (with getattr)."""
        self._shell = shell
        self._by_file: OrderedDict[str, CellRun] = OrderedDict()
        self._latest: dict[str, CellRun] = {}
        self._pending_id: str | None = None
        self.current: CellRun | None = None

    # --- IPython events ------------------------------------------------------------

    def pre_run_cell(self, info: object) -> None:
        cell_id = getattr(info, "cell_id", None)
        self._pending_id = cell_id if isinstance(cell_id, str) and cell_id else None
        self.current = None

    def post_run_cell(self, result: object) -> CellRun | None:
        """Record the cell that just ran; returns its record (None if it never compiled)."""
        info = getattr(result, "info", None)
        count = getattr(result, "execution_count", None)
        cell_id = getattr(info, "cell_id", None) or self._pending_id
        self._pending_id = None
        filename = self._filename(info, count)
        if filename is None:
            return None
        run = CellRun(filename, count if isinstance(count, int) else None, cell_id)
        self._by_file[filename] = run
        self._by_file.move_to_end(filename)
        while len(self._by_file) > MAX_CELLS:
            self._by_file.popitem(last=False)
        if cell_id is not None:
            self._latest[cell_id] = run
            if len(self._latest) > MAX_CELLS:
                self._latest.pop(next(iter(self._latest)))
        self.current = run
        return run

    # --- lookups -------------------------------------------------------------------

    def lookup(self, filename: str) -> CellRun | None:
        """The cell run that compiled ``filename``, or None when it is not a cell."""
        run = self._by_file.get(filename)
        if run is not None:
            return run
        count = self._filename_map().get(filename)
        if isinstance(count, int):  # a cell that ran before the extension loaded
            return CellRun(filename, count, None)
        return None

    def source_changed(self, run: CellRun) -> bool:
        """The cell has run different code since ``run`` (its frame shows old code)."""
        if run.cell_id is None:
            return False
        latest = self._latest.get(run.cell_id)
        return latest is not None and latest.filename != run.filename

    def is_cell_file(self, filename: str) -> bool:
        if self.lookup(filename) is not None:
            return True
        if filename.startswith("<ipython-input-"):
            return True
        tmp = _ipykernel_tmp_dir()
        return tmp is not None and filename.startswith(tmp)

    # --- helpers -------------------------------------------------------------------

    def _filename_map(self) -> dict[str, object]:
        fmap = getattr(getattr(self._shell, "compile", None), "_filename_map", None)
        return fmap if isinstance(fmap, dict) else {}

    def _filename(self, info: object, count: object) -> str | None:
        """The file name IPython compiled this cell under (None: it never compiled)."""
        fmap = self._filename_map()
        raw = getattr(info, "raw_cell", None)
        transformed = getattr(info, "transformed_cell", None) or raw
        compiler = getattr(self._shell, "compile", None)
        if isinstance(raw, str) and compiler is not None:
            try:
                name = compiler.get_code_name(raw, transformed, count)
            except Exception:
                name = None
            if isinstance(name, str) and fmap.get(name) == count:
                return name
        # Fallback: the newest map entry with this execution count (a compiler whose
        # naming we cannot reproduce). Bounded: the cell just ran, so it is recent.
        for i, name in enumerate(reversed(fmap)):
            if i > 1000:
                break
            if fmap[name] == count:
                return name
        return None


def _ipykernel_tmp_dir() -> str | None:
    mod = sys.modules.get("ipykernel.compiler")
    get = getattr(mod, "get_tmp_directory", None)
    if get is None:
        return None
    try:
        return str(get()) + os.sep
    except Exception:
        return None
