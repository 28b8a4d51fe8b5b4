"""Which collective a hung job waits in, and which rank never entered it (R57).

Each rank's heartbeat, once it has not stepped for ``hang_s``, carries its stack and the
collectives its flight recorder holds per process group (worker/collectives.py): the
newest one, ``in`` it (waiting) or finished. The kernel merges them:

- the collective the job waits in: the (op, seq, group) most ranks are ``in`` (on a tie
  the highest seq); the group's members whose newest seq on that group is lower, or that
  are not in it at all, **never entered it** (the others cannot finish without them); a
  member ``in`` another op at the same seq called a different collective (a mismatch);
- the merged stacks: ranks grouped by their innermost frame of their own code (else their
  innermost frame), each group with the collective it is in, if any.

Nothing here trusts the wire: ``collective_of`` keeps only well-formed, bounded fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from ..wire.signals import wire_int, wire_num
from .words import rank_list

if TYPE_CHECKING:
    from ...protocol import messages as m
    from ..wire.messages import CollectiveGroup
    from .alarm_fields import AlarmExtra


class Collective(TypedDict):
    """A heartbeat's ``collective`` as ``collective_of`` keeps it (checked, bounded)."""

    source: str
    backward: bool
    groups: list[CollectiveGroup]


class HangDiagnosis(TypedDict):
    """What ``diagnose`` found: the alarm's ``collective``, the ranks that never entered
    it, the sentence."""

    collective: m.RankCollective
    missing: list[int]
    sentence: str


MAX_GROUPS = 8
MAX_MERGED = 16


def _text(value: object, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def collective_of(raw: object) -> Collective | None:
    """A heartbeat's ``collective``, checked and bounded (None if malformed)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("groups"), list):
        return None
    groups: list[CollectiveGroup] = []
    for g in raw["groups"][:MAX_GROUPS]:
        if not isinstance(g, dict):
            continue
        seq, group = wire_int(g.get("seq")), _text(g.get("group"), 64)
        if seq is None or group is None:
            continue
        raw_members = g.get("ranks")
        members: list[int] | None = None
        if isinstance(raw_members, list) and all(
            isinstance(r, int) and r >= 0 for r in raw_members[:1024]
        ):
            members = [int(r) for r in raw_members[:1024]]
        groups.append(
            {
                "op": _text(g.get("op"), 64),
                "seq": seq,
                "group": group,
                "shapes": _text(g.get("shapes"), 200),
                "in": g.get("in") is True,
                "since_s": wire_num(g.get("since_s")),
                "ranks": members,
            }
        )
    return {
        "source": _text(raw.get("source"), 32) or "unknown",
        "backward": raw.get("backward") is True,
        "groups": groups,
    }


def top_frame(stack: list[str] | None, user: list[bool] | None) -> str | None:
    """The innermost frame of the rank's own code (else its innermost frame), without
    the source line: ``file:line in function``."""
    if not stack:
        return None
    line = stack[-1]
    if user is not None and len(user) == len(stack):
        mine = [s for s, u in zip(stack, user, strict=True) if u]
        if mine:
            line = mine[-1]
    return line.split(": ", 1)[0][:300]


def label(c: CollectiveGroup | m.RankCollective, backward: bool) -> str:
    """``all_reduce (seq 41, default group, [1024] float32)``."""
    parts = [f"seq {c['seq']}", f"{c['group']} group"]
    if c.get("shapes"):
        parts.append(str(c["shapes"]))
    via = ""
    if backward:  # an all-reduce issued inside backward is DDP's reducer's (its buckets)
        ddp = c.get("op") in ("all_reduce", "allreduce")
        via = ", DDP's gradient all-reduce in backward" if ddp else ", in backward"
    return f"{c.get('op') or 'a collective'} ({', '.join(parts)}{via})"


RankView = tuple[int, "Collective | None", list[str] | None, list[bool] | None]


def diagnose(ranks: list[RankView]) -> HangDiagnosis | None:
    """``ranks``: (number, collective, stack, stack_user) of each live rank. Returns
    ``collective`` (the alarm's field), ``missing`` (never entered), ``sentence``;
    None when no rank is known to be in a collective."""
    waiting: dict[tuple[str, int, str], list[int]] = {}
    entry: dict[tuple[str, int, str], CollectiveGroup] = {}
    backward: dict[int, bool] = {}
    for n, c, _, _ in ranks:
        if c is None:
            continue
        backward[n] = bool(c["backward"])
        for g in c["groups"]:
            if g["in"]:
                key = (g["group"], g["seq"], g.get("op") or "")
                waiting.setdefault(key, []).append(n)
                entry.setdefault(key, g)
    if not waiting:
        return None
    key = max(waiting, key=lambda k: (len(waiting[k]), k[1]))
    group, seq, op = key
    inside = sorted(waiting[key])
    g = entry[key]
    members = g.get("ranks") or sorted(n for n, _, _, _ in ranks)
    numbers = {n for n, _, _, _ in ranks}
    missing: list[int] = []
    mismatched: list[tuple[int, str]] = []
    behind: dict[int, str] = {}
    for n, c, _, _ in ranks:
        if n in inside or n not in members:
            continue
        mine = next((x for x in (c["groups"] if c else []) if x["group"] == group), None)
        if mine is None or mine["seq"] < seq:
            missing.append(n)
            if mine is not None:
                state = "in" if mine["in"] else "finished"
                behind[n] = f"{state} {mine.get('op') or 'a collective'} seq {mine['seq']}"
        elif mine["seq"] == seq and mine["in"] and (mine.get("op") or "") != op:
            mismatched.append((n, str(mine.get("op"))))
    silent = sorted(m for m in members if m not in numbers and m not in inside)
    ddp = all(backward.get(n, False) for n in inside)
    what = label(g, ddp)
    sentence = f"{rank_list(inside).capitalize()} {'is' if len(inside) == 1 else 'are'} in {what}"
    if missing:
        sentence += f"; {rank_list(missing)} never entered it"
        told = [f"rank {n}'s last on that group: {behind[n]}" for n in missing if n in behind]
        if told:
            sentence += f" ({'; '.join(told)})"
    for n, other in mismatched:
        sentence += f"; rank {n} is in {other} at the same seq (a mismatched collective)"
    if silent:
        sentence += f"; {rank_list(silent)} of its group sent nothing"
    source = next((c["source"] for n, c, _, _ in ranks if n in inside and c), "unknown")
    if source == "sequence":
        sentence += (
            " (torch's flight recorder was off: op and seq read from the stack and the"
            " default group's sequence number)"
        )
    field: m.RankCollective = {
        "op": g.get("op"),
        "seq": seq,
        "group": group,
        "shapes": g.get("shapes"),
        "ddp_backward": ddp,
        "ranks_in": inside,
        "never_entered": sorted(missing),
        "source": source,
    }
    return {"collective": field, "missing": sorted(missing), "sentence": sentence}


def merged_stacks(ranks: list[RankView], diag: HangDiagnosis | None) -> list[m.RankStackGroup]:
    """Ranks grouped by their top frame (and what they are in): the panel's merged view."""
    inside = set(diag["collective"]["ranks_in"]) if diag else set()
    what = (
        label(diag["collective"], diag["collective"].get("ddp_backward", False)) if diag else None
    )
    groups: dict[tuple[str, str | None], list[int]] = {}
    for n, _, stack, user in ranks:
        where = top_frame(stack, user)
        if where is None:
            continue
        groups.setdefault((where, what if n in inside else None), []).append(n)
    order = sorted(groups.items(), key=lambda kv: min(kv[1]))
    out: list[m.RankStackGroup] = [
        {"ranks": sorted(ns), "where": where, "in": in_} for (where, in_), ns in order
    ]
    return out[:MAX_MERGED]


def merged_sentence(merged: list[m.RankStackGroup]) -> str:
    """``ranks 0, 2 at train.py:40 in step (in all_reduce ...); rank 1 at data.py:31``."""
    parts = []
    for m in merged:
        part = f"{rank_list(m['ranks'])} at {m['where']}"
        parts.append(part + (f" (in {m['in']})" if m["in"] else ""))
    return "; ".join(parts)


def hang_extra(views: list[RankView], diag: HangDiagnosis | None) -> tuple[AlarmExtra | None, str]:
    """A hang alarm's ``collective`` and ``merged`` fields, and the sentences they add
    to its message (R57); nothing when no rank sent its collectives."""
    merged = merged_stacks(views, diag)
    if diag is None and not any(c is not None for _, c, _, _ in views):
        return None, ""
    extra: AlarmExtra = {"merged": merged}
    told = ""
    if diag is not None:
        extra["collective"] = diag["collective"]
        told = f" {diag['sentence']}."
    else:
        told = " No rank is in a collective."
    if len(merged) > 1:
        told += f" Stacks: {merged_sentence(merged)}."
    return extra, told
