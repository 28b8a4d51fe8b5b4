"""The alarm settings: the panel's settings, validated by the ``set_thresholds`` action.

The data behind the defaults: alarms.py (``explode_abs``), explosion.py and
divergence.py (the relative rules).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...protocol.messages import SetThresholdsArgs


@dataclass
class Thresholds:
    """Alarm settings (the panel's settings; validated by the ``set_thresholds`` action)."""

    #: Total norm above this is an explosion (None: only the relative rules). See the
    #: module docstring for the data behind the default.
    explode_abs: float | None = 1e12
    #: Total norm above this many times its running median is an explosion (a noisy run
    #: raises the bar up to 10x this; see Detector._baseline).
    explode_factor: float = 10.0
    #: Samples in the running window before the running-median rule replaces the early
    #: rule (EARLY_FACTOR times the first samples' level).
    explode_warmup: int = 5
    #: A layer norm below this (and above 0) counts as vanishing.
    vanish_floor: float = 1e-8
    #: ... as does a layer norm below this fraction of the total norm.
    vanish_ratio: float = 1e-5
    #: ... for this many consecutive sampled steps.
    vanish_steps: int = 50
    #: GradScaler skips within the last AMP_WINDOW steps that raise an alarm.
    amp_skips: int = 10
    #: A GradScaler scale below this has collapsed.
    amp_min_scale: float = 1.0

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def updated(self, changes: SetThresholdsArgs) -> Thresholds:
        """These settings with ``changes`` (the validated ``set_thresholds`` arguments)."""
        return replace(self, **changes)
