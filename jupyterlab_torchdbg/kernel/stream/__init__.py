"""The streaming core: bounded series history, pending points, and throttled flushes.

Every capability records numbers here (``log()`` scalars; gradient norms and memory
samples as blocks). Points wait until a throttled flush sends every series in one
``series`` message whose numbers travel as binary buffers (x float64, y float32,
row-major: one row of every name per x, exactly as the rows were recorded, so a flush
sends its rows without reshuffling them).

Names travel once: every series and block has an integer ``id`` (never reused while the
extension is loaded); a ``series`` message carries a block's ``names`` only the first time
the block goes out, later ones just its ``id``. A block's names never change: new names
(e.g. a model's layers changed) make a new block with a new id, announced the same way.
Every snapshot carries every id with its names, so a panel that connects late, reloads
or resyncs learns the whole table there (R05, R06).

Files, one idea each:

- ``stream``: ``Stream`` — the store, throttled flushes, snapshots and their locking;
- ``series``: ``Series`` (one scalar name) and ``BlockSeries`` (many names, one row per
  call, rows left on their device until the flush);
- ``history``: the bounded, decimated history both kinds share;
- ``retired``: earlier runs' series and blocks (runs.py): still flushed, in snapshots
  with their ``run``, forgotten after ``limits.KEEP_RUNS`` runs;
- ``host_copy``: getting device values to the host once per flush without a sync (R26);
- ``packed``: ``log()``'s rows packed as float32 bytes, sent and kept without torch;
- ``budget``: the sending budget (flush less often when a flush costs more than 0.1%);
- ``reads``: read-side queries on the scalar series (``tails``, ``newest``);
- ``wire``: block headers and buffer bytes, as PROTOCOL.md specifies;
- ``names``: ``bound_name``, the one rule that makes every name wire-safe and at most
  512 characters (a feature that reports a series name elsewhere, e.g. in a status
  message, passes it through ``bound_name`` so the panel finds the series, R44);
- ``run_points``: every kept point of one run as plain series (for an export);
- ``limits``: every bound (read and patch them there: ``stream.limits.MAX_SERIES``).
"""

from __future__ import annotations

from . import limits
from .names import bound_name
from .series import BlockSeries, Series
from .stream import Stream

__all__ = [
    "BlockSeries",
    "Series",
    "Stream",
    "bound_name",
    "limits",
]
