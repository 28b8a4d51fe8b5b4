"""Where activation memory goes: the bytes each module saves for backward in one forward,
per sample, and the batch that fits in what is free.

Files: ``measure`` (the saved-tensor hooks and the module stack of one forward),
``estimate`` (free memory under the limit, the batch that fits, the words),
``meter`` (the ``measure_activations`` action, the idle re-run, the report in
``memory.activations``).
"""

from __future__ import annotations

from .estimate import memory_limit
from .measure import Saved, SavedBytes
from .meter import ActivationMeter

__all__ = ["ActivationMeter", "Saved", "SavedBytes", "memory_limit"]
