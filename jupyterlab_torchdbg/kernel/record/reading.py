"""Reading the run record back: the ``record`` message, one run's data, the texts.

Every sentence says only what was recorded: the step and run of the last write, the
cause of the end as the watcher or the kernel wrote it (``unknown`` when neither could),
and the memory figures of that moment (growth per step only when it was measured).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import time
from typing import TYPE_CHECKING, TypedDict, cast

from ..units import short_bytes

if TYPE_CHECKING:
    from ...protocol import messages as m

#: Kernels listed in ``record``, newest first.
LIST_KERNELS = 10
#: Runs listed per kernel.
LIST_RUNS = 50
#: Points per series in ``record_run`` (evenly thinned), series and alarms at most.
RUN_POINTS = 2000
RUN_SERIES = 400
RUN_ALERTS = 200
#: A kernel whose row has no end, whose process is alive and that wrote this recently
#: is still running (another kernel of the same notebook).
LIVE_S = 30.0
#: What ``load_run`` returns: the run's info, its series ``(name, xs, ys)``, its alarms.
Loaded = tuple["m.RecordRun", list[tuple[str, list[float], list[float]]], list[dict[str, object]]]


class KernelRow(TypedDict):
    """A row of the ``kernels`` table as ``SELECT *`` reads it (store.py's schema)."""

    id: str
    session: str | None
    pid: int | None
    started: float | None
    last_write: float | None
    end_kind: str | None
    end_code: int | None
    end_note: str | None
    oom_start: int | None
    oom_kills: int | None
    run: int | None
    step: int | None
    mem_used: int | None
    mem_limit: int | None
    mem_per_step: float | None
    exception: str | None
    dismissed: int


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _alive(pid: int | None) -> bool:
    if not pid or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_of(row: KernelRow, now: float) -> dict[str, object]:
    """The ``RecordEnd`` of a kernel row."""
    kind, code, kills = row["end_kind"], row["end_code"], row["oom_kills"]
    if kind is None:
        last = row["last_write"]
        recent = last is not None and now - last < LIVE_S
        if _alive(row["pid"]) and recent:
            return {
                "kind": "running",
                "code": None,
                "oom_kills": None,
                "text": "still running (another kernel of this notebook)",
            }
        return {
            "kind": "unknown",
            "code": None,
            "oom_kills": None,
            "text": "cause unknown: no exit status was seen",
        }
    if kind == "signal":
        text = f"killed by signal {code} ({_signal_name(int(code or 0))})"
    elif kind == "oom_kill":
        parts = [f"signal {code}"] if code is not None else []
        if kills:
            parts.append(f"the cgroup counted {kills} OOM kill{'s' if kills != 1 else ''}")
        text = "killed by the out-of-memory killer" + (f": {', '.join(parts)}" if parts else "")
    elif kind == "exit":
        text = f"exited with status {code}"
    elif kind == "shutdown":
        text = row["end_note"] or "shut down"
    else:
        kind = "unknown"
        text = "cause unknown: no exit status was seen"
        if kills:
            text += f"; the cgroup counted {kills} OOM kill{'s' if kills != 1 else ''}"
    return {"kind": kind, "code": code, "oom_kills": kills, "text": text}


def headline(row: KernelRow, end: dict[str, object]) -> str:
    run, step = row["run"], row["step"]
    where = (
        f"at step {step:,} of run {run}"
        if run and step
        else f"in run {run}"
        if run
        else "before any training step"
    )
    kind = end["kind"]
    if kind == "running":
        return "Another kernel of this notebook is running."
    if kind == "shutdown":
        return f"The kernel {end['text']} {where}." if run else f"The kernel {end['text']}."
    verb = "stopped" if kind == "unknown" else "died" if kind != "exit" else "exited"
    if kind == "exit":
        detail = [f"status {end['code']}"]
    elif kind == "signal":
        detail = [f"killed by signal {end['code']}"]  # the name is in the end's own text
    else:
        detail = [str(end["text"])]
    used, limit, per_step = row["mem_used"], row["mem_limit"], row["mem_per_step"]
    if per_step is not None and per_step > 0 and used is not None:
        mem = f"memory was climbing {short_bytes(per_step)}/step"
        mem += (
            f", {short_bytes(used)} of {short_bytes(limit)}" if limit else f", {short_bytes(used)}"
        )
        detail.append(mem)
    elif used is not None and limit:
        detail.append(f"memory {short_bytes(used)} of {short_bytes(limit)}")
    elif used is not None:
        detail.append(f"memory {short_bytes(used)}")
    return f"The kernel {verb} {where} ({'; '.join(detail)})."


def _rows(
    conn: sqlite3.Connection, sql: str, args: tuple[str | int, ...]
) -> list[dict[str, object]]:
    cur = conn.execute(sql, args)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def _run_info(
    info: dict[str, object], row: tuple[int | None, int | None] | None = None
) -> m.RecordRun:
    """A stored ``RunInfo`` (JSON the writer stored); the kernel's last run (``row``: the
    kernel's run and step) counts to its last step (its ``runs`` message is a little older
    than the last points written)."""
    steps = _number(info.get("steps"), 0)
    if row is not None and row[0] == info.get("id") and row[1]:
        steps = max(steps, int(row[1]))
    start, end = info.get("start"), info.get("end")
    cell_id, count = info.get("cell_id"), info.get("execution_count")
    optimizers = info.get("optimizers") or []
    return {
        "id": _number(info.get("id"), 1),
        "start": float(start) if isinstance(start, int | float) and start else 0.0,
        "end": end if isinstance(end, int | float) else None,
        "steps": int(steps),
        "alerts": _number(info.get("alerts"), 0),
        "cell_id": cell_id if isinstance(cell_id, str) else None,
        "execution_count": count if isinstance(count, int) else None,
        "optimizers": [str(o) for o in optimizers] if isinstance(optimizers, list) else [],
    }


def _number(value: object, default: int) -> int:
    """A stored JSON number as an int (``default`` when absent, null or zero)."""
    return int(value) if isinstance(value, int | float) and value else default


def kernels(
    conn: sqlite3.Connection, self_id: str, now: float | None = None
) -> list[dict[str, object]]:
    """The notebook's earlier kernels as ``RecordKernel``s, newest first."""
    now = time.time() if now is None else now
    out: list[dict[str, object]] = []
    rows = _rows(
        conn,
        "SELECT * FROM kernels WHERE id != ? ORDER BY started DESC LIMIT ?",
        (self_id, LIST_KERNELS),
    )
    for row in cast("list[KernelRow]", rows):  # SELECT * of the kernels table
        end = end_of(row, now)
        infos = [
            _run_info(json.loads(r[0]), (row["run"], row["step"]))
            for r in conn.execute(
                "SELECT info FROM runs WHERE kernel=? ORDER BY id DESC LIMIT ?",
                (row["id"], LIST_RUNS),
            )
        ][::-1]
        exc = json.loads(row["exception"]) if row["exception"] else None
        memory = None
        if row["mem_used"] is not None or row["mem_limit"] is not None:
            memory = {
                "used": row["mem_used"],
                "limit": row["mem_limit"],
                "per_step": row["mem_per_step"],
            }
        out.append(
            {
                "id": row["id"],
                "started": float(row["started"] or 0.0),
                "last_write": float(row["last_write"] or row["started"] or 0.0),
                "end": end,
                "run": row["run"],
                "step": row["step"],
                "memory": memory,
                "text": headline(row, end),
                "runs": infos,
                "exception": exc,
                "dismissed": bool(row["dismissed"]),
            }
        )
    return out


def load_run(conn: sqlite3.Connection, kernel: str, run: int) -> Loaded | None:
    """One recorded run: its info, its series ``(name, xs, ys)`` (NaN where SQLite
    holds NULL, every series thinned to ``RUN_POINTS``) and its alarms; None if unknown."""
    found = conn.execute("SELECT info FROM runs WHERE kernel=? AND id=?", (kernel, run)).fetchone()
    if found is None:
        return None
    row = conn.execute("SELECT run, step FROM kernels WHERE id=?", (kernel,)).fetchone()
    info = _run_info(json.loads(found[0]), (row[0], row[1]) if row else None)
    # The memory timelines are recorded outside runs (run 0, x = Unix time): the run's
    # stretch of them belongs to it.
    start = info["start"]
    end = info["end"] if info["end"] is not None else math.inf
    last = conn.execute("SELECT last_write FROM kernels WHERE id=?", (kernel,)).fetchone()
    if info["end"] is None and last and last[0]:
        end = float(last[0])
    names = [
        (r[0], r[1])
        for r in conn.execute(
            "SELECT DISTINCT name, run FROM points WHERE kernel=? AND "
            "(run=? OR (run=0 AND name LIKE 'mem/%')) LIMIT ?",
            (kernel, run, RUN_SERIES),
        )
    ]
    series = []
    for name, in_run in names:
        if in_run == run:
            pts = conn.execute(
                "SELECT x, y FROM points WHERE kernel=? AND run=? AND name=? ORDER BY x, rowid",
                (kernel, run, name),
            ).fetchall()
        else:
            pts = conn.execute(
                "SELECT x, y FROM points WHERE kernel=? AND run=0 AND name=? AND x >= ? "
                "AND x <= ? ORDER BY x, rowid",
                (kernel, name, start, min(end, 1e300)),
            ).fetchall()
        if not pts:
            continue
        stride = max(1, math.ceil(len(pts) / RUN_POINTS))
        kept = pts[::stride]
        series.append(
            (
                name,
                [float(p[0]) for p in kept],
                [math.nan if p[1] is None else float(p[1]) for p in kept],
            )
        )
    alerts = [
        json.loads(r[0])
        for r in conn.execute(
            "SELECT body FROM alerts WHERE kernel=? AND run=? ORDER BY rowid LIMIT ?",
            (kernel, run, RUN_ALERTS),
        )
    ]
    return info, series, alerts


def special(v: float) -> float | str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def run_message(kernel: str, run: int, loaded: Loaded) -> dict[str, object]:
    info, series, alerts = loaded
    return {
        "method": "record_run",
        "kernel": kernel,
        "run": run,
        "info": info,
        "series": [{"name": n, "x": xs, "y": [special(y) for y in ys]} for n, xs, ys in series],
        "alerts": alerts,
    }
