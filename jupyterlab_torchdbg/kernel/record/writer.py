"""Writing the run record: an observer of what the kernel broadcasts, a writer thread.

The observer sees every message the kernel side broadcasts, whether a panel is open or
not (``CommHub.observe``): stream flushes (``series``, at the stream's 10 Hz cadence, on
the thread that flushed), ``runs``, ``alert`` and ``exception``. It only copies what it
needs into a bounded queue (the series' buffers as bytes): no SQLite on the thread that
trains (R50). The writer thread wakes every ``COMMIT_S`` seconds and writes what the
queue holds in one transaction, with the kernel's heartbeat (``last_write``), its current
run and step and the memory facts (used, limit, growth per step) of that moment. So a
kernel killed at any moment loses at most the last ``COMMIT_S`` seconds.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Mapping

from . import store

#: Seconds between commits while there is news (the stream flushes every 0.1 s).
COMMIT_S = 0.5
#: Seconds between heartbeats of an idle kernel.
IDLE_HEARTBEAT_S = 5.0
#: Messages waiting at most (older ones are dropped, counted).
QUEUE = 5000
MAX_ALERTS = 2000

#: The memory facts of the moment: ``used``, ``limit``, ``per_step`` (numbers or None).
MemoryFacts = Callable[[], Mapping[str, object]]
#: The current (else last) run's id and step count, read live (plain ints the training
#: thread updates at each step boundary): the step a kernel died at is not the last one
#: a stream flush or a ``runs`` message happened to carry.
Progress = Callable[[], "tuple[int, int] | None"]
#: A row of the ``points`` table: kernel, run, name, x, y (None: NaN).
Point = tuple[str, int, str, float, float | None]


class Writer:
    def __init__(
        self,
        conn: sqlite3.Connection,
        kernel_id: str,
        memory_facts: MemoryFacts,
        on_error: Callable[[str], None],
        clock: Callable[[], float] = time.time,
        progress: Progress | None = None,
    ) -> None:
        self.conn = conn
        self._progress = progress
        self._beaten: tuple[int, int] | None = None
        self.kernel_id = kernel_id
        self._facts = memory_facts
        self._on_error = on_error
        self._clock = clock
        self._queue: deque[tuple[str, Mapping[str, object], list[bytes]]] = deque()
        self.dropped = 0
        self._names: dict[int, list[str]] = {}
        self._series: set[str] = set()
        #: (run, name) -> [seen, keep_every, stored]
        self._thin: dict[tuple[int, str], list[int]] = {}
        self._max_step: dict[int, float] = {}
        self._run_steps: dict[int, int] = {}
        self._current: int | None = None
        self._latest: int | None = None
        self.rows = 0
        self._alerts = 0
        self._last_beat = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: Called on the writer thread once, ``after_s`` after start (the record refresh).
        self.later: tuple[float, Callable[[], None]] | None = None

    # --- the observer (any thread; never raises, never blocks on SQLite) ---------------

    def observe(self, data: Mapping[str, object], buffers: list[memoryview] | None) -> None:
        try:
            method = data.get("method")
            if method == "series":
                item = ("series", data, [bytes(b) for b in buffers or []])
            elif method in ("runs", "alert", "exception"):
                item = (str(method), data, [])
            else:
                return
            with self._lock:
                if len(self._queue) >= QUEUE:
                    self._queue.popleft()
                    self.dropped += 1
                self._queue.append(item)
        except Exception:
            self._on_error("record:observe")

    # --- the thread ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="torchdbg-record", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        started = self._clock()
        while not self._stop.wait(COMMIT_S):
            self.flush()
            if self.later is not None and self._clock() - started >= self.later[0]:
                fn, self.later = self.later[1], None
                try:
                    fn()
                except Exception:
                    self._on_error("record:later")

    def stop(self, end_kind: str | None, note: str | None = None) -> None:
        """Stop the thread, write what is queued, and (if given) the kernel's end."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self.flush(force=True)
        if end_kind is not None:
            try:
                self.conn.execute(
                    "UPDATE kernels SET end_kind=?, end_code=NULL, end_note=?, last_write=? "
                    "WHERE id=? AND end_kind IS NULL",
                    (end_kind, note, self._clock(), self.kernel_id),
                )
            except sqlite3.Error:
                self._on_error("record:end")

    def flush(self, force: bool = False) -> None:
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
        now = self._clock()
        live = self._live()
        if (
            not items
            and not force
            and live == self._beaten
            and now - self._last_beat < IDLE_HEARTBEAT_S
        ):
            return
        try:
            self.conn.execute("BEGIN")
            for method, data, buffers in items:
                if method == "series":
                    self._series_rows(data, buffers)
                elif method == "runs":
                    self._runs(data)
                elif method == "alert":
                    self._alert(data)
                else:
                    self._exception(data)
            self._beat(now, live)
            self.conn.execute("COMMIT")
            self._last_beat, self._beaten = now, live
        except Exception:
            self._on_error("record:write")
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    # --- what each message becomes ----------------------------------------------------

    def _series_rows(self, msg: Mapping[str, object], buffers: list[bytes]) -> None:
        rows: list[Point] = []
        blocks = msg.get("blocks") or []
        for i, header in enumerate(blocks if isinstance(blocks, list) else []):
            if not isinstance(header, Mapping):
                continue
            bid, count = _int(header.get("id")), _int(header.get("count"))
            header_names = header.get("names")
            if header_names and isinstance(header_names, list):
                self._names[bid] = [str(n) for n in header_names]
            names = self._names.get(bid)
            if not names or 2 * i + 1 >= len(buffers) or count <= 0:
                continue
            xs = array("d")
            xs.frombytes(buffers[2 * i][: 8 * count])
            ys = array("f")
            ys.frombytes(buffers[2 * i + 1][: 4 * count * len(names)])
            run = _int(header.get("run"))
            width = len(names)
            for j, name in enumerate(names):
                if name not in self._series and len(self._series) >= store.MAX_SERIES:
                    continue
                self._series.add(name)
                step_series = not name.startswith("mem/")
                thin = self._thin.setdefault((run, name), [0, 1, 0])
                for r in range(min(count, len(xs))):
                    seen = thin[0]
                    thin[0] += 1
                    if seen % thin[1]:
                        continue
                    if self.rows >= store.MAX_ROWS:
                        break  # the kernel's bound: later points are not recorded
                    y = float(ys[r * width + j])
                    x = float(xs[r])
                    rows.append((self.kernel_id, run, name, x, None if math.isnan(y) else y))
                    thin[2] += 1
                    self.rows += 1
                    if step_series and x > self._max_step.get(run, -math.inf):
                        self._max_step[run] = x
                if thin[2] >= store.SERIES_CAP:
                    self._halve(rows, run, name, thin)
        self.conn.executemany("INSERT INTO points VALUES (?, ?, ?, ?, ?)", rows)

    def _halve(self, rows: list[Point], run: int, name: str, thin: list[int]) -> None:
        """A series at its cap keeps every other point, and every other new one after."""
        self.conn.executemany("INSERT INTO points VALUES (?, ?, ?, ?, ?)", rows)
        rows.clear()
        cur = self.conn.execute(
            "DELETE FROM points WHERE rowid IN (SELECT rowid FROM (SELECT rowid, "
            "ROW_NUMBER() OVER (ORDER BY rowid) AS n FROM points "
            "WHERE kernel=? AND run=? AND name=?) WHERE n % 2 = 0)",
            (self.kernel_id, run, name),
        )
        gone = max(0, cur.rowcount)
        thin[2] -= gone
        self.rows -= gone
        thin[1] *= 2

    def _runs(self, msg: Mapping[str, object]) -> None:
        current = msg.get("current")
        self._current = current if isinstance(current, int) else None
        runs = msg.get("runs") or []
        for info in runs if isinstance(runs, list) else []:
            if not isinstance(info, dict):
                continue
            rid = info.get("id")
            if not isinstance(rid, int):
                continue
            self._run_steps[rid] = _int(info.get("steps"))
            self._latest = rid if self._latest is None else max(self._latest, rid)
            self.conn.execute(
                "INSERT OR REPLACE INTO runs VALUES (?, ?, ?)",
                (self.kernel_id, rid, json.dumps(info)),
            )

    def _alert(self, msg: Mapping[str, object]) -> None:
        alerts = msg.get("alerts") or []
        for item in alerts if isinstance(alerts, list) else []:
            if self._alerts >= MAX_ALERTS or not isinstance(item, dict):
                return
            self._alerts += 1
            self.conn.execute(
                "INSERT OR REPLACE INTO alerts VALUES (?, ?, ?, ?)",
                (self.kernel_id, str(item.get("id")), item.get("run"), json.dumps(item)),
            )

    def _exception(self, msg: Mapping[str, object]) -> None:
        if msg.get("replay"):
            return
        info = msg.get("exception") or {}
        if not isinstance(info, Mapping):
            info = {}
        frames = msg.get("frames") or []
        if not isinstance(frames, list):
            frames = []
        focus = msg.get("focus")
        frame = frames[focus] if isinstance(focus, int) and 0 <= focus < len(frames) else None
        when = msg.get("time")
        summary = {
            "ename": str(info.get("type", "")),
            "evalue": str(info.get("message", ""))[:2000],
            "cell_id": msg.get("cell_id"),
            "line": frame.get("lineno") if isinstance(frame, dict) else None,
            "time": float(when) if isinstance(when, int | float) and when else self._clock(),
        }
        self.conn.execute(
            "UPDATE kernels SET exception=? WHERE id=?", (json.dumps(summary), self.kernel_id)
        )

    def _live(self) -> tuple[int, int] | None:
        if self._progress is None:
            return None
        try:
            return self._progress()
        except Exception:
            self._on_error("record:progress")
            return None

    def _beat(self, now: float, live: tuple[int, int] | None = None) -> None:
        run = self._current if self._current is not None else self._latest
        if live is not None and (run is None or live[0] >= run):
            run = live[0]
        step = None
        if run is not None:
            seen = max(self._run_steps.get(run, 0), int(self._max_step.get(run, 0)))
            if live is not None and live[0] == run:
                seen = max(seen, live[1])
            step = seen if seen > 0 else None
        facts: Mapping[str, object] = {}
        try:
            facts = self._facts() or {}
        except Exception:
            self._on_error("record:memory")
        self.conn.execute(
            "UPDATE kernels SET last_write=?, run=?, step=?, mem_used=?, mem_limit=?, "
            "mem_per_step=? WHERE id=?",
            (
                now,
                run,
                step,
                facts.get("used"),
                facts.get("limit"),
                facts.get("per_step"),
                self.kernel_id,
            ),
        )


def _int(value: object) -> int:
    """A header's number (``id``, ``count``, ``run``, ``steps``) as an int; 0 when absent."""
    return int(value) if isinstance(value, int | float) else 0
