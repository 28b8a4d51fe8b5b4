"""The capability modules attached when the extension loads."""

from __future__ import annotations

FEATURE_MODULES: list[str] = []
