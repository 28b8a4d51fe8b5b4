"""Which collective a rank is in (or last finished): torch's own flight recorder (R57).

torch 2.13's c10d flight recorder is not NCCL-only: ProcessGroupGloo records every
collective it enqueues too (op, per-group sequence number, process group, input sizes
and dtypes, time created, retired or not), the ones DDP's C++ reducer issues from
backward included, which Python-level wrappers of ``torch.distributed`` would miss. It
is on when ``TORCH_FR_BUFFER_SIZE`` (or ``TORCH_NCCL_TRACE_BUFFER_SIZE``) is set before
the process group is created: ``enable_recorder`` sets a small ring in the worker at
activation, unless the user set one. Recording is torch's, in C++, per collective it
already runs: nothing is added to the step (no collective, no host-device sync).

``snapshot`` is read only by the agent's thread, only in a heartbeat of a rank that has
not stepped for ``hang_s`` (a dump of a 64-entry ring: well under a millisecond). Per
process group, the newest entry: ``in`` (not retired: the rank waits in it) or the last
one it finished. Where the recorder is off (the process group was created before the
worker started), the default group's sequence number (``_get_sequence_number_for_group``,
a local counter that counts the reducer's all-reduces too) with the op read off the
training thread's stack, and ``source`` says so.
"""

from __future__ import annotations

import json
import os
import sys
import time
from types import FrameType
from typing import Any

#: Entries kept by the flight recorder when the user did not ask for a size.
RING = 64
RECORDER_ENVS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
#: Process groups described in one snapshot (the ones with the newest entries).
MAX_GROUPS = 8
_C10D = f"torch{os.sep}distributed{os.sep}distributed_c10d.py"
_AUTOGRAD = f"torch{os.sep}autograd{os.sep}"
_TENSOR = f"torch{os.sep}_tensor.py"


class RecorderHandle:
    """Puts back the environment ``enable_recorder`` changed (the recorder itself stays
    on for the process's process groups: torch has no switch to turn it off)."""

    def __init__(self, name: str | None) -> None:
        self.name = name

    def remove(self) -> None:
        if self.name is not None and os.environ.get(self.name) == str(RING):
            del os.environ[self.name]
        self.name = None


def enable_recorder() -> RecorderHandle:
    """Ask torch to record this process's collectives (a no-op where the user set a size)."""
    if any(os.environ.get(n) for n in RECORDER_ENVS):
        return RecorderHandle(None)
    os.environ[RECORDER_ENVS[0]] = str(RING)
    return RecorderHandle(RECORDER_ENVS[0])


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


def _shape(sizes: Any, dtypes: Any) -> str | None:
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


def _entry(e: dict[str, Any], names: dict[str, str], now_ns: int) -> dict[str, Any]:
    pg = e.get("process_group")
    pg_id = str(pg[0]) if isinstance(pg, list) and pg else "?"
    op = str(e.get("profiling_name", "?"))
    created = e.get("time_created_ns")
    since = (now_ns - created) / 1e9 if isinstance(created, int) and created > 0 else None
    return {
        "op": op.split(":", 1)[-1][:64],
        "seq": int(e.get("collective_seq_id") or e.get("p2p_seq_id") or 0),
        "group": names.get(pg_id, pg_id)[:64],
        "shapes": _shape(e.get("input_sizes"), e.get("input_dtypes")),
        "in": not e.get("retired", True),
        "since_s": None if since is None else round(max(0.0, since), 3),
        "p2p": bool(e.get("is_p2p")),
    }


def _groups(trace: dict[str, Any]) -> tuple[dict[str, str], dict[str, list[int]]]:
    """pg id -> a name ("default" for the world), and name -> its global ranks."""
    names: dict[str, str] = {}
    ranks: dict[str, list[int]] = {}
    for e in trace.get("entries", []):
        pg = e.get("process_group")
        if isinstance(pg, list) and len(pg) == 2:
            desc = str(pg[1])
            names[str(pg[0])] = "default" if desc == "default_pg" else desc or str(pg[0])
    config = trace.get("pg_config")
    for pg_name, cfg in config.items() if isinstance(config, dict) else []:
        try:
            members = json.loads(cfg.get("ranks", "[]"))
        except (ValueError, AttributeError):
            continue
        name = names.get(str(pg_name), "default" if str(pg_name) in ("", "0") else str(pg_name))
        if isinstance(members, list) and len(members) <= 1024:
            ranks[name] = [int(r) for r in members]
    return names, ranks


def from_recorder() -> dict[str, Any] | None:
    """The newest entry of each process group in torch's flight recorder, or None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        from torch._C import _distributed_c10d as c10d

        trace = json.loads(c10d._dump_fr_trace_json(True, False))  # type: ignore[attr-defined]
    except Exception:
        return None
    entries = trace.get("entries") if isinstance(trace, dict) else None
    if not entries:
        return None
    names, ranks = _groups(trace)
    now_ns = time.time_ns()
    newest: dict[str, dict[str, Any]] = {}
    for raw in entries:
        if isinstance(raw, dict):
            e = _entry(raw, names, now_ns)
            if not e["p2p"]:
                newest[e["group"]] = e  # the ring is in record order
    groups = sorted(newest.values(), key=lambda e: e["since_s"] or 0.0)[:MAX_GROUPS]
    for e in groups:
        e["ranks"] = ranks.get(e["group"])
        del e["p2p"]
    return {"source": "flight_recorder", "groups": groups}


def from_sequence(frame: FrameType | None) -> dict[str, Any] | None:
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
    entry = {
        "op": op if op is not None else ("all_reduce" if backward else None),
        "seq": seq,
        "group": "default",
        "shapes": None,
        "in": op is not None or backward,
        "since_s": None,
        "ranks": None,
    }
    return {"source": "sequence", "groups": [entry]}


def snapshot(frame: FrameType | None) -> dict[str, Any] | None:
    """What the heartbeat carries: the collectives per group, and whether the training
    thread is in backward (DDP's reducer all-reduces there: no Python frame of c10d)."""
    got = from_recorder() or from_sequence(frame)
    if got is None:
        return None
    got["backward"] = in_backward(frame)
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
