"""Which collective a rank is in (or last finished): torch's own flight recorder (R57).

torch 2.13's c10d flight recorder is not NCCL-only, and it is on by default (a ring of
2000 entries; ``TORCH_FR_BUFFER_SIZE=0`` turns it off): ProcessGroupGloo records every
collective it enqueues too (op, per-group sequence number, process group, input sizes
and dtypes, time created) and keeps per group the last collective enqueued and the last
completed; the all-reduces DDP's C++ reducer issues from backward are there as well,
which Python-level wrappers of ``torch.distributed`` would miss. So nothing is wrapped,
hooked or switched on here: recording is torch's own, in C++, for the collectives it
already runs; nothing is added to the step (no collective, no host-device sync).

``snapshot`` is read only by the agent's thread, only in a heartbeat of a rank that has
not stepped for ``hang_s``, and at most every ``REUSE_S`` (a dump of the full ring costs
tens of milliseconds). Per process group, the newest entry: ``in`` (enqueued, not
completed: the rank waits in it) or the last one it finished. Where the recorder is off
or empty, the default group's sequence number (``_get_sequence_number_for_group``, a
local counter that counts the reducer's all-reduces too) with the op read off the
training thread's stack, and ``source`` says so.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from types import FrameType

from typing_extensions import TypedDict

from ..wire.messages import Collective, CollectiveGroup

#: torch's recorder dumps (the second exists in CUDA builds only).
DUMPS = ("_dump_fr_trace_json", "_dump_nccl_trace_json")


class _Trace(TypedDict):
    """torch's recorders' dumps, merged (``_dump``)."""

    entries: list[object]
    pg_config: dict[str, object]
    pg_status: dict[str, object]


class _Entry(CollectiveGroup, total=False):
    pg_id: str  # the recorder's group id, dropped before the entry is sent


#: Seconds a snapshot is reused (a dump of torch's 2000-entry ring costs tens of ms).
REUSE_S = 2.0
#: Process groups described in one snapshot (the ones with the newest entries).
MAX_GROUPS = 8
_C10D = f"torch{os.sep}distributed{os.sep}distributed_c10d.py"
_AUTOGRAD = f"torch{os.sep}autograd{os.sep}"
_TENSOR = f"torch{os.sep}_tensor.py"


#: The recorder's dtype names (c10's ScalarType) as torch's Python names.
DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
}


def _shape(sizes: object, dtypes: object) -> str | None:
    if not isinstance(sizes, list) or not sizes:
        return None
    parts = []
    for i, size in enumerate(sizes[:4]):
        dtype = dtypes[i] if isinstance(dtypes, list) and i < len(dtypes) else ""
        dims = "x".join(str(d) for d in size) if isinstance(size, list) else "?"
        parts.append(f"[{dims}] {DTYPES.get(str(dtype), str(dtype).lower())}".strip())
    if len(sizes) > 4:
        parts.append(f"+{len(sizes) - 4}")
    return ", ".join(parts)[:200]


def _entry(e: Mapping[str, object], names: dict[str, str], now_ns: int) -> _Entry:
    pg = e.get("process_group")
    pg_id = str(pg[0]) if isinstance(pg, list) and pg else "?"
    op = str(e.get("profiling_name", "?"))
    created = e.get("time_created_ns")
    since = (now_ns - created) / 1e9 if isinstance(created, int) and created > 0 else None
    return {
        "op": op.split(":", 1)[-1][:64],
        "seq": _int(e.get("collective_seq_id") or 0),
        "group": names.get(pg_id, pg_id)[:64],
        "shapes": _shape(e.get("input_sizes"), e.get("input_dtypes")),
        "in": False,
        "since_s": None if since is None else round(max(0.0, since), 3),
        "ranks": None,
        "pg_id": pg_id,
    }


def _groups(trace: _Trace) -> tuple[dict[str, str], dict[str, list[int]]]:
    """pg id -> a name ("default" for the world), and name -> its global ranks."""
    names: dict[str, str] = {}
    ranks: dict[str, list[int]] = {}
    for e in trace["entries"]:
        if not isinstance(e, dict):
            continue
        pg = e.get("process_group")
        if isinstance(pg, list) and len(pg) == 2:
            desc = str(pg[1])
            names[str(pg[0])] = "default" if desc == "default_pg" else desc or str(pg[0])
    config = trace.get("pg_config")
    for pg_name, cfg in config.items() if isinstance(config, dict) else []:
        if not isinstance(cfg, dict):
            continue
        try:
            members = json.loads(cfg.get("ranks", "[]"))
        except ValueError:
            continue
        name = names.get(str(pg_name), "default" if str(pg_name) in ("", "0") else str(pg_name))
        if isinstance(members, list) and len(members) <= 1024:
            ranks[name] = [int(r) for r in members]
    return names, ranks


def _status(trace: _Trace) -> dict[str, tuple[int, int]]:
    """pg id -> (last collective enqueued, last completed), torch's own counters."""
    out: dict[str, tuple[int, int]] = {}
    status = trace.get("pg_status")
    for pg_id, st in status.items() if isinstance(status, dict) else []:
        if not isinstance(st, dict):
            continue
        try:
            out[str(pg_id)] = (
                int(st["last_enqueued_collective"]),
                int(st["last_completed_collective"]),
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _dump() -> _Trace:
    """torch's recorders, merged: the generic one (gloo and the others) and, in a CUDA
    build, NCCL's own (``_dump_nccl_trace_json``; not exercised by this CPU test suite)."""
    merged: _Trace = {"entries": [], "pg_config": {}, "pg_status": {}}
    try:
        from torch._C import _distributed_c10d as c10d
    except Exception:
        return merged
    for name in DUMPS:
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            trace = json.loads(dump(True, False))
        except Exception:
            continue
        if not isinstance(trace, dict):
            continue
        if isinstance(trace.get("entries"), list):
            merged["entries"].extend(trace["entries"])
        if isinstance(trace.get("pg_config"), dict):
            merged["pg_config"].update(trace["pg_config"])
        if isinstance(trace.get("pg_status"), dict):
            merged["pg_status"].update(trace["pg_status"])
    return merged


def from_recorder() -> Collective | None:
    """The newest collective of each process group in torch's flight recorder (on by
    default in torch 2.13, gloo included), or None. ``in``: enqueued but not completed
    (torch's per-group status; an entry's own ``retired`` flag lags its completion)."""
    if sys.modules.get("torch.distributed") is None:
        return None
    trace = _dump()
    entries = trace.get("entries")
    if not entries:
        return None
    names, ranks = _groups(trace)
    status = _status(trace)
    now_ns = time.time_ns()
    newest: dict[str, _Entry] = {}
    for raw in reversed(entries):  # the ring is in record order: newest last
        if not isinstance(raw, dict) or raw.get("is_p2p"):
            continue
        pg = raw.get("process_group")
        pg_id = str(pg[0]) if isinstance(pg, list) and pg else "?"
        if pg_id in newest:
            continue
        e = _entry(raw, names, now_ns)
        enqueued, completed = status.get(pg_id, (e["seq"], e["seq"]))
        e["in"] = e["seq"] == enqueued and completed < enqueued
        newest[pg_id] = e
        if len(newest) >= MAX_GROUPS or len(newest) >= max(1, len(status)):
            break
    for e in newest.values():
        e["ranks"] = ranks.get(e["group"])
        del e["pg_id"]
    groups: list[CollectiveGroup] = list(newest.values())
    return {"source": "flight_recorder", "groups": groups}


def from_sequence(frame: FrameType | None) -> Collective | None:
    """Without the recorder: the default group's sequence number (torch's own counter,
    bumped as each collective starts) and the op from the training thread's stack."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_initialized():
            return None
        seq = int(dist.distributed_c10d._get_default_group()._get_sequence_number_for_group())
    except Exception:
        return None
    op = None
    f = frame
    while f is not None:
        name = f.f_code.co_filename
        if op is None and name.endswith(_C10D):
            op = f.f_code.co_name  # the outermost c10d frame: the call the user made
        f = f.f_back
    del f
    backward = in_backward(frame)
    entry: CollectiveGroup = {
        "op": op if op is not None else ("all_reduce" if backward else None),
        "seq": seq,
        "group": "default",
        "shapes": None,
        "in": op is not None or backward,
        "since_s": None,
        "ranks": None,
    }
    return {"source": "sequence", "groups": [entry]}


_last: tuple[float, object, Collective | None] = (-REUSE_S, None, None)


def snapshot(frame: FrameType | None, key: object = None) -> Collective | None:
    """What the heartbeat carries: the collectives per group, and whether the training
    thread is in backward (DDP's reducer all-reduces there: no Python frame of c10d).
    Read again at most every ``REUSE_S`` while ``key`` (the rank's step) is the same:
    a hung rank's collectives do not move; a new hang reads afresh."""
    global _last
    now = time.monotonic()
    if now - _last[0] < REUSE_S and key == _last[1] and key is not None:
        return _last[2]
    got = from_recorder() or from_sequence(frame)
    if got is not None:
        got["backward"] = in_backward(frame)
    _last = (now, key, got)
    return got


def in_backward(frame: FrameType | None) -> bool:
    f = frame
    found = False
    while f is not None and not found:
        name = f.f_code.co_filename
        found = _AUTOGRAD in name or (name.endswith(_TENSOR) and f.f_code.co_name == "backward")
        f = f.f_back
    del f
    return found


def _int(x: object) -> int:
    """``int(x)`` of a recorder's number (anything else: TypeError, as ``int`` raises)."""
    if isinstance(x, (int, float, str)):
        return int(x)
    raise TypeError(f"not a number: {type(x).__name__}")
