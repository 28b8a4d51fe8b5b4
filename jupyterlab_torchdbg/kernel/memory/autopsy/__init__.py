"""OOM autopsy: what filled the memory when a cell died of ``OutOfMemoryError``.

Built in ``post_run_cell`` right after the failure, from
- the message (requested size, free/total, allocated/reserved; parsed by the exception
  ``parse_oom`` of ``kernel/oom_text.py``, which the exception classifier shares, so
  both read the message the same way),
- the allocator's host-side counters and ``memory_summary()`` text at that moment,
- the breakdown (parameters / gradients / optimizer state / everything else),
- the largest live tensors on the failing device with the names that reach them: the
  notebook's namespace, then every frame of the failing traceback (metadata only),
and it chooses remedies from those numbers. R23: nothing here allocates device memory or
synchronises (only storage sizes, shapes and addresses are read), and the result holds
strings and numbers only: the frames and tensors it looked at are dropped before it
returns.

Files: ``report`` (``oom_facts``, ``build``), ``live_tensors`` (``largest_tensors``),
``remedies`` (``choose_remedies``).
"""

from __future__ import annotations

from .live_tensors import MAX_TENSOR_ROWS, largest_tensors
from .remedies import choose_remedies
from .report import MESSAGE_CHARS, SUMMARY_CHARS, build, oom_facts

__all__ = [
    "MAX_TENSOR_ROWS",
    "MESSAGE_CHARS",
    "SUMMARY_CHARS",
    "build",
    "choose_remedies",
    "largest_tensors",
    "oom_facts",
]
