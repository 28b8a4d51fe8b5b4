"""Memory leaks named while they grow, and the kill foreseen (issue #24, R49).

Files: ``fit`` (the per-step least-squares slope and what counts as steady growth),
``scan`` (what the notebook's names hold, as numbers only), ``holders`` (two scans
compared: what grows with the steps), ``limit`` (``memory_limit``: cgroup, host, the
``TORCHDBG_MEMORY_LIMIT`` stand-in), ``guard`` (the opt-in pause before the limit),
``text`` (the sentences), ``watch`` (``LeakWatch``: per step, per run, the alert),
``alert`` (the ``memory_leak`` / ``memory_limit`` alerts), ``rss`` (this process's
resident set, cheap enough for every step).
Nothing here imports torch at import time.
"""

from __future__ import annotations

from .limit import memory_limit
from .watch import LeakWatch, validate_guard

__all__ = ["LeakWatch", "memory_limit", "validate_guard"]
