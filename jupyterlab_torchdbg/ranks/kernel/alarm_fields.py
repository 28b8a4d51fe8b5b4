"""The fields some ranks alarms add to the common ones (alarms.py raises them, and
grad_alarms.py composes the gradient ones): the gradient alarms' ``layer``, ``cause``,
``ranks`` and ``remedy``; a hang's ``collective`` and ``merged`` stacks. Typed as the
panel's ``RankAlarm`` (protocol/messages.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from typing_extensions import TypedDict

    from ...protocol import messages as m

    class AlarmExtra(TypedDict, total=False, closed=True):
        layer: str | None
        cause: m.RankAlarmCause
        ranks: list[int]
        remedy: str | None
        merged: list[m.RankStackGroup]
        collective: m.RankCollective


#: A gradient finding's cause, as the panel's alarm names it (the others: not one).
CAUSES: dict[str, m.RankAlarmCause] = {
    c: c for c in ("input", "forward", "weights", "loss", "backward", "overflow", "unknown")
}


def add_extra(alarm: m.RankAlarm, extra: AlarmExtra) -> None:
    """Copy ``extra``'s fields into ``alarm`` (a remedy bounded to 2000 characters)."""
    if "layer" in extra:
        alarm["layer"] = extra["layer"]
    if "cause" in extra:
        alarm["cause"] = extra["cause"]
    if "ranks" in extra:
        alarm["ranks"] = extra["ranks"]
    if "remedy" in extra:
        remedy = extra["remedy"]
        alarm["remedy"] = remedy[:2000] if remedy is not None else None
    if "merged" in extra:
        alarm["merged"] = extra["merged"]
    if "collective" in extra:
        alarm["collective"] = extra["collective"]


def layer_of(report: Mapping[str, object]) -> str | None:
    """A rank's finding's or signal's layer (a string, checked by wire/signals.py)."""
    layer = report.get("layer")
    return layer if isinstance(layer, str) else None


class RaiseAlarm(Protocol):
    """``Alarms.raise_alarm``, as the gradient alarms call it."""

    def __call__(
        self,
        kind: m.RankAlarmKind,
        rank: int,
        step: int | None,
        message: str,
        *,
        once: bool = True,
        extra: AlarmExtra | None = None,
    ) -> m.RankAlarm | None: ...


#: The gradient alarms' kinds, as the panel's alarm names them.
KINDS: dict[str, m.RankAlarmKind] = {k: k for k in ("non_finite", "explosion", "vanishing")}
