"""The memory alerts (``memory_leak``, ``memory_limit``): ``AlertItem`` of source ``memory``."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


@dataclass
class MemoryAlert:
    """An ``AlertItem`` of source ``memory`` (duck-typed for the gradient AlertLog)."""

    kind: str
    message: str
    remedy: str
    step: int
    track: str
    value: float | None
    id: str
    run: int | None
    severity: str = "warning"
    layer: str | None = None
    source: str = "memory"
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        if self.run is None:
            del out["run"]
        return out
