"""A worker's ``exception`` as the panel's ``exception`` message, with its ``rank``.

The worker captured the exception where it happened (type, message, frames and, when its
rules could, a diagnosis: ``kernel/exceptions``). Here it gets what only the kernel knows:
an id of this session, the notebook cell that started the job, ``debuggable: false``
(``%debug`` cannot reach another process) and the rank's identity. Whatever the worker
sent that is not of the schema's shape is dropped or replaced by the generic view, so the
message the panel gets is always valid (the kernel side carries no schema validator).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, cast

from ...protocol import load_schema

if TYPE_CHECKING:
    from ...protocol import messages as m


@cache
def _keys(definition: str) -> frozenset[str]:
    """The properties the schema gives ``definition`` (``ExceptionFrame``, ``Diagnosis``):
    what a worker's frame or diagnosis may keep."""
    props = load_schema()["$defs"][definition]["properties"]
    return frozenset(props)


@cache
def _categories() -> frozenset[str]:
    """The diagnosis categories of the schema (``DiagnosisCategory``)."""
    return frozenset(load_schema()["$defs"]["Diagnosis"]["properties"]["category"]["enum"])


def _int_or_none(x: object) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None


def exception_info(raw: object) -> m.ExceptionInfo:
    info = raw if isinstance(raw, dict) else {}
    out: m.ExceptionInfo = {
        "type": str(info.get("type") or "Exception")[:200],
        "module": str(info.get("module") or "builtins")[:200],
        "message": str(info.get("message", ""))[:10_000],
        "message_truncated": bool(info.get("message_truncated", False)),
    }
    unavailable = info.get("message_unavailable")
    if isinstance(unavailable, bool):
        out["message_unavailable"] = unavailable
    return out


def frame(raw: object, index: int) -> dict[str, object] | None:
    if not isinstance(raw, dict):
        return None
    keys = _keys("ExceptionFrame")
    f = {k: v for k, v in raw.items() if k in keys}
    origin = f.get("origin") if f.get("origin") in ("cell", "file", "library") else "library"
    out: dict[str, object] = {
        **f,
        "position": _int_or_none(f.get("position")) or index,
        "origin": origin,
        "user": origin != "library",
        "function": str(f.get("function", "?")),
        "file": str(f.get("file", "?")),
        "lineno": _int_or_none(f.get("lineno")) or 0,
        "line": str(f.get("line", "")),
        "locals": f.get("locals") if isinstance(f.get("locals"), list) else [],
        "locals_total": _int_or_none(f.get("locals_total")) or 0,
        "locals_truncated": bool(f.get("locals_truncated", False)),
    }
    if not out["locals"]:
        out["locals_total"] = 0
    if not isinstance(out.get("process", ""), str):
        del out["process"]
    return out


def generic_diagnosis(info: m.ExceptionInfo, rank: int, focus: int | None) -> dict[str, object]:
    lines = info["message"].strip().splitlines()
    first = lines[0][:300] if lines else ""
    return {
        "category": "generic",
        "title": info["type"],
        "headline": f"{info['type']}: {first}" if first else info["type"],
        "culprits": [],
        "remedy": None,
        "hints": [f"Raised in rank {rank}; the other ranks of the job stop or wait for it."],
        "facts": {},
        "confidence": "certain",
        "links": [],
        "where": focus,
    }


def diagnosis(
    raw: object, info: m.ExceptionInfo, rank: int, focus: int | None
) -> dict[str, object]:
    d = raw if isinstance(raw, dict) else None
    if d is None or d.get("category") not in _categories() or not isinstance(d.get("title"), str):
        return generic_diagnosis(info, rank, focus)
    keys = _keys("Diagnosis")
    out = {k: v for k, v in d.items() if k in keys}
    out.setdefault("headline", out["title"])
    out["headline"] = str(out["headline"])
    for key in ("culprits", "hints", "links"):
        if not isinstance(out.get(key), list):
            out[key] = []
    out["links"] = [x for x in out["links"] if x in ("memory", "grads")]
    out["hints"] = [str(h) for h in out["hints"]]
    out["culprits"] = [c for c in out["culprits"] if isinstance(c, dict)]
    if not isinstance(out.get("facts"), dict):
        out["facts"] = {}
    if out.get("confidence") not in ("certain", "likely"):
        out["confidence"] = "likely"
    remedy = out.get("remedy")
    out["remedy"] = remedy if isinstance(remedy, str) else None
    out["where"] = _int_or_none(out.get("where"))
    return out


def unwrapped(raw: object, n_frames: int) -> dict[str, object] | None:
    """A worker's ``unwrapped`` (a DataLoader error inside a rank), in the schema's shape."""
    if not isinstance(raw, dict):
        return None
    index = raw.get("index")
    batch = raw.get("batch")
    frame_at = _int_or_none(raw.get("frame"))
    why = raw.get("why_unknown")
    dataset = raw.get("dataset")
    return {
        "where": str(raw.get("where", ""))[:200],
        "worker_id": _int_or_none(raw.get("worker_id")),
        "pid": _int_or_none(raw.get("pid")),
        "exception": exception_info(raw.get("exception")),
        "index_known": raw.get("index_known") is True,
        "index": index if isinstance(index, (int, str, list, dict)) else None,
        "batch": batch[:64] if isinstance(batch, list) else None,
        "batch_size": _int_or_none(raw.get("batch_size")),
        "dataset": dataset[:200] if isinstance(dataset, str) else None,
        "frame": frame_at if frame_at is not None and frame_at < n_frames else None,
        "why_unknown": why[:500] if isinstance(why, str) else None,
    }


def build(
    content: Mapping[str, object],
    identity: Mapping[str, object],
    *,
    message_id: str,
    cell_id: str | None,
    execution_count: int | None,
) -> m.Exception:
    """The panel's ``exception`` message for one worker exception."""
    info = exception_info(content.get("exception"))
    raw_frames = content.get("frames")
    frames = [
        f
        for i, raw in enumerate(raw_frames[:200] if isinstance(raw_frames, list) else [])
        if (f := frame(raw, i)) is not None
    ]
    focus = _int_or_none(content.get("focus"))
    if focus is None or focus >= len(frames):
        users = [i for i, f in enumerate(frames) if f["user"]]
        focus = users[-1] if users else None
    raw_elided = content.get("elided")
    elided = [
        e
        for e in (raw_elided if isinstance(raw_elided, list) else [])
        if isinstance(e, dict)
        and _int_or_none(e.get("after")) is not None
        and (_int_or_none(e.get("count")) or 0) >= 1
        and e.get("reason") in ("repeated", "limit")
    ]
    raw_chain = content.get("chain")
    chain = [c for c in (raw_chain if isinstance(raw_chain, list) else []) if isinstance(c, dict)]
    total = _int_or_none(content.get("frames_total"))
    number = identity.get("rank")
    rank = number if isinstance(number, int) else 0  # (a checked identity's int)
    unwrapped_error = unwrapped(content.get("unwrapped"), len(frames))
    message: dict[str, object] = {
        "method": "exception",
        "id": message_id[:64],
        "time": round(time.time(), 3),
        "replay": False,
        "execution_count": execution_count,
        "cell_id": cell_id,
        "debuggable": False,
        "exception": info,
        "diagnosis": diagnosis(content.get("diagnosis"), info, rank, focus),
        "frames": frames,
        "focus": focus,
        "frames_total": max(total or 0, len(frames)),
        "elided": [
            {"after": e["after"], "count": e["count"], "reason": e["reason"]} for e in elided
        ],
        "chain": chain,
        "truncated": bool(content.get("truncated", False)),
        "rank": dict(identity),
    }
    if unwrapped_error is not None:
        message["unwrapped"] = unwrapped_error
    # The schema's shape, field by field above (the worker's JSON checked or dropped);
    # tests validate every message against the schema.
    return cast("m.Exception", message)
