"""Every bound of the stream, in one place (R08, R25, R44).

The other modules read these as ``limits.NAME`` at call time (never ``from .limits
import NAME``), so a test can lower a bound with ``monkeypatch.setattr(limits, ...)``.
"""

from __future__ import annotations

#: History points kept per series before it is decimated by two.
HISTORY_CAPACITY = 4096
#: Pending (unsent) points per series; older ones are dropped and counted.
PENDING_CAPACITY = 200_000
#: At most this many distinct series are recorded; later names are ignored and counted.
MAX_SERIES = 2048
#: At most this many names in all blocks together (gradient and memory series). A new
#: block that would pass it makes the stream forget its oldest blocks (counted as ignored
#: series), so a loop that keeps building differently named models stays bounded (R44).
MAX_BLOCK_NAMES = 8192
#: Longest series name on the wire (the schema's ``maxLength``); longer names are cut
#: with a marker that keeps them distinct (see ``names.bound_name``, R44).
MAX_NAME_LENGTH = 512
#: Default flush interval: at most 10 messages per second (R08).
DEFAULT_INTERVAL_S = 0.1
#: Share of wall time the flushes may take (PERFORMANCE.md: sending <= 0.1%; a fifth
#: under it, so that noise does not carry it over): when a flush costs more than this
#: share of the interval, the stream flushes less often (``Stream.send_slowdown``).
SEND_BUDGET = 0.0008
#: ... but never less often than this many intervals (the panel stays live: with the
#: default interval, at least 2.5 messages per second). 1 turns the budget off.
MAX_SEND_SLOWDOWN = 4.0
#: Weight of the newest flush in the running mean of a flush's cost.
SEND_COST_ALPHA = 0.2
#: Pending (unsent) rows per block; older ones are dropped and counted. Bounded so that
#: rows left on a device cannot grow without limit (R25).
BLOCK_PENDING_ROWS = 4096
#: The stream keeps the series and gradient blocks of this many runs (the current one
#: included); older runs' are forgotten (runs.py, PROTOCOL.md "Runs").
KEEP_RUNS = 5
