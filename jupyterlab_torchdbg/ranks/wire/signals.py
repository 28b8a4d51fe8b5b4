"""What a worker says about its gradients, as the kernel takes it: checked field by
field and bounded (R52: what a worker sends is data, never code).

A ``rows`` message's row may carry ``nonfinite`` (the rank's diagnosis of a non-finite
step, ranks/worker/rank_signals.py) and the message ``signals`` (its detector's explosion /
vanishing alerts); job.py keeps them for the alarms (grad_alarms.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...protocol.json_types import JsonObject

#: The causes a rank's diagnosis names (kernel/grads/diagnose.py), and "unknown".
CAUSES = ("input", "forward", "weights", "loss", "backward", "overflow", "unknown")
#: The detector alerts a rank reports.
SIGNAL_KINDS = ("explosion", "vanishing")


def wire_int(x: object, lo: int = 0) -> int | None:
    """An int of at least ``lo`` from a worker's message (bools refused), else None."""
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= lo else None


def wire_num(x: object) -> float | None:
    """A finite number from a worker's message (bools refused), else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def _text(x: object, limit: int) -> str | None:
    return x[:limit] if isinstance(x, str) else None


def finding_of(raw: object) -> JsonObject | None:
    """A row's ``nonfinite`` (the rank's diagnosis of a non-finite step), checked field
    by field and bounded (R52: what a worker sends is data, never code): a
    ``messages.Finding``'s fields (typed as JSON while the kernel's rank.py and
    grad_alarms.py hold these as plain dicts)."""
    if not isinstance(raw, dict):
        return None
    cause = raw.get("cause")
    return {
        "cause": cause if cause in CAUSES else "unknown",
        "layer": _text(raw.get("layer"), 512),
        "message": _text(raw.get("message"), 1200) or "",
        "rerun": raw.get("rerun") is True,
        "why_not_rerun": _text(raw.get("why_not_rerun"), 300),
        "batch_finite": raw.get("batch_finite") is True,
        "loss_checked": raw.get("loss_checked") is True,
    }


def signal_of(raw: object) -> JsonObject | None:
    """One explosion / vanishing alert of a rank's detector, checked and bounded."""
    if not isinstance(raw, dict) or raw.get("kind") not in SIGNAL_KINDS:
        return None
    step = wire_int(raw.get("step"), 1)
    if step is None:
        return None
    return {
        "kind": str(raw["kind"]),
        "step": step,
        "layer": _text(raw.get("layer"), 512),
        "message": _text(raw.get("message"), 1200) or "",
        "remedy": _text(raw.get("remedy"), 600),
        "value": wire_num(raw.get("value")),
    }
