"""What the at-step diagnosis found: a cause, the module it names, and the words."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Finding:
    cause: str
    layer: str | None
    message: str
