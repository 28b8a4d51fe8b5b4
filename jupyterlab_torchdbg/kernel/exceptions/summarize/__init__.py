"""Metadata-only summaries of frame locals (R17, R21).

A summary is a small dict of plain values the panel shows as one row of a locals table.
Nothing here calls ``repr``, ``str``, ``len``, ``bool`` or ``__eq__`` on a user object:
values are dispatched on their exact type, torch and numpy objects are read through
their metadata (shape, dtype, device, ...), and every other object is shown by its type
name only. No CUDA call is ever made (R22, R23).

Nor does anything here run a subclass's code (R54): tensor metadata comes from torch's C
getters with subclass dispatch off (``tensor_meta``; a DTensor is never called, R35), an
object's parts from its own dicts (``object_parts``), and a capture's ``budget`` bounds
the time spent, marking the rest "not read (time budget)".

Files, one idea each (guarded reads, safe text and size bounds are ``kernel/safe_read.py``,
neutral ground: the memory autopsy reads with them too): ``kinds``
(a value's kind by exact type), ``row`` (``summarize``: one value -> one row),
``torch_rows`` and ``plain_rows`` (the per-kind fillers), ``frame_locals``
(``summarize_locals`` and ``strip_private``), ``tensor_meta``, ``object_parts`` and
``budget``.
"""

from __future__ import annotations

from ...safe_read import NA, safe_text, type_name
from .frame_locals import strip_private, summarize_locals
from .kinds import TENSOR, Classifier, rank
from .row import summarize

__all__ = [
    "NA",
    "TENSOR",
    "Classifier",
    "rank",
    "safe_text",
    "strip_private",
    "summarize",
    "summarize_locals",
    "type_name",
]
