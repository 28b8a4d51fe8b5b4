"""The run store's file (R50/R51) without a kernel: bounds, thinning, a broken or
foreign file set aside, owner-only permissions, one notebook's file never another's,
and a writer killed mid-write leaving a database that opens whole."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from array import array
from pathlib import Path
from typing import Any

import pytest

from jupyterlab_torchdbg.kernel.record import reading, store
from jupyterlab_torchdbg.kernel.record.writer import Writer


def _writer(tmp_path: Path, kernel: str = "0123456789abcdef") -> Writer:
    opened = store.open_store(tmp_path / "nb.sqlite")
    opened.conn.execute(
        "INSERT INTO kernels(id, pid, started, last_write) VALUES (?, ?, ?, ?)",
        (kernel, 1, 1.0, 1.0),
    )
    return Writer(
        opened.conn, kernel, lambda: {"used": 100, "limit": 1000, "per_step": 5.0}, _raise
    )


def _raise(site: str) -> None:
    raise AssertionError(site)


def _series(
    block: int, names: list[str] | None, xs: list[float], rows: list[list[float]], run: int = 1
) -> tuple[dict[str, Any], list[memoryview]]:
    header: dict[str, Any] = {"id": block, "count": len(xs), "run": run}
    if names:
        header["names"] = names
    x = array("d", xs)
    y = array("f", [v for row in rows for v in row])
    return {"method": "series", "seq": 1, "blocks": [header]}, [
        memoryview(x).cast("B"),
        memoryview(y).cast("B"),
    ]


def test_points_runs_alerts_and_the_heartbeat_are_written(tmp_path: Path) -> None:
    w = _writer(tmp_path)
    w.observe(*_series(1, ["loss", "acc"], [1, 2, 3], [[3.0, 0.1], [math.nan, 0.2], [1.0, 0.3]]))
    # the name table: a later block of the same id comes without names
    w.observe(*_series(1, None, [4], [[0.5, 0.4]]))
    w.observe(
        {
            "method": "runs",
            "current": 1,
            "runs": [{"id": 1, "start": 1.0, "end": None, "steps": 4}],
        },
        None,
    )
    w.observe(
        {"method": "alert", "alerts": [{"id": "a", "run": 1, "step": 2, "message": "m"}]}, None
    )
    w.observe({"method": "memory"}, None)  # not recorded
    w.flush()
    info, series, alerts = reading.load_run(w.conn, w.kernel_id, 1)  # type: ignore[misc]
    got = {n: (xs, ys) for n, xs, ys in series}
    assert got["loss"][0] == [1, 2, 3, 4]
    assert math.isnan(got["loss"][1][1]) and got["loss"][1][3] == 0.5
    assert got["acc"][1] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert info["steps"] == 4 and [a["id"] for a in alerts] == ["a"]
    row = w.conn.execute(
        "SELECT run, step, mem_used, mem_limit, mem_per_step FROM kernels"
    ).fetchone()
    assert row == (1, 4, 100, 1000, 5.0)


def test_the_heartbeat_carries_the_live_step_when_nothing_was_sent(tmp_path: Path) -> None:
    """A loop that sleeps (or is killed) between two stream flushes: the kernel's row
    still says the step the training thread reached, read live, not the last one a
    flush carried; an unchanged step writes nothing until the idle heartbeat."""
    opened = store.open_store(tmp_path / "nb.sqlite")
    kid = "0123456789abcdef"
    opened.conn.execute(
        "INSERT INTO kernels(id, pid, started, last_write) VALUES (?, ?, ?, ?)",
        (kid, 1, 1.0, 1.0),
    )
    live = [(2, 278)]
    now = [100.0]
    w = Writer(opened.conn, kid, lambda: {}, _raise, clock=lambda: now[0], progress=lambda: live[0])
    w.observe(*_series(1, ["loss"], [277, 278], [[1.0], [0.9]], run=2))
    w.flush()
    step = "SELECT run, step, last_write FROM kernels"
    assert opened.conn.execute(step).fetchone() == (2, 278, 100.0)
    live[0], now[0] = (2, 300), 100.5  # the steps since were never flushed
    w.flush()
    assert opened.conn.execute(step).fetchone() == (2, 300, 100.5)
    now[0] = 101.0  # nothing new: no write before the idle heartbeat
    w.flush()
    assert opened.conn.execute(step).fetchone() == (2, 300, 100.5)
    live[0] = (3, 0)  # a new run, before its first step: the run, no step yet
    w.flush()
    assert opened.conn.execute(step).fetchone() == (3, None, 101.0)


def test_a_series_is_thinned_at_its_cap_and_spans_the_whole_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "SERIES_CAP", 100)
    w = _writer(tmp_path)
    for start in range(0, 1000, 50):
        xs = [float(s) for s in range(start, start + 50)]
        w.observe(*_series(1, ["loss"] if start == 0 else None, xs, [[x] for x in xs]))
        w.flush()
    n = w.conn.execute("SELECT COUNT(*), MIN(x), MAX(x) FROM points").fetchone()
    assert n[0] <= 100 and n[1] == 0 and n[2] >= 900, n


def test_the_series_and_row_bounds_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "MAX_SERIES", 3)
    monkeypatch.setattr(store, "MAX_ROWS", 10)
    w = _writer(tmp_path)
    w.observe(*_series(1, ["a", "b", "c", "d", "e"], [1, 2, 3], [[1, 2, 3, 4, 5]] * 3))
    w.flush()
    names = {r[0] for r in w.conn.execute("SELECT DISTINCT name FROM points")}
    assert names == {"a", "b", "c"}
    assert w.conn.execute("SELECT COUNT(*) FROM points").fetchone()[0] == 9
    w.observe(*_series(1, None, [4, 5], [[1, 2, 3, 4, 5]] * 2))
    w.flush()
    assert w.conn.execute("SELECT COUNT(*) FROM points").fetchone()[0] == 10


def test_only_the_newest_kernels_are_kept(tmp_path: Path) -> None:
    conn = store.open_store(tmp_path / "nb.sqlite").conn
    for i in range(15):
        conn.execute("INSERT INTO kernels(id, started) VALUES (?, ?)", (f"{i:016x}", float(i)))
        conn.execute("INSERT INTO points VALUES (?, 1, 'loss', 1, 1)", (f"{i:016x}",))
    store.prune(conn, 10)
    ids = [r[0] for r in conn.execute("SELECT id FROM kernels ORDER BY started")]
    assert ids == [f"{i:016x}" for i in range(5, 15)]
    assert conn.execute("SELECT COUNT(*) FROM points").fetchone()[0] == 10


@pytest.mark.parametrize(
    "content", [b"not a database at all" * 100, b"SQLite format 3\x00" + b"\xff" * 4000, None]
)
def test_a_broken_or_foreign_file_is_set_aside_with_a_note(
    tmp_path: Path, content: bytes | None
) -> None:
    path = tmp_path / "nb.sqlite"
    if content is None:  # a database of another program
        other = sqlite3.connect(path)
        other.execute("CREATE TABLE t(x)")
        other.execute("PRAGMA user_version=7")
        other.commit()
        other.close()
    else:
        path.write_bytes(content)
        os.chmod(path, 0o600)
    opened = store.open_store(path)
    assert opened.note and "set aside" in opened.note
    assert opened.conn.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
    assert [p.name for p in tmp_path.iterdir() if ".broken-" in p.name]
    # the next open is clean
    opened.conn.close()
    assert store.open_store(path).note is None


def test_r51_the_folder_and_files_are_the_owners_only(tmp_path: Path) -> None:
    d = tmp_path / "records"
    store.private_dir(d)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    f = store.db_file(d, "/home/u/a.ipynb")
    # the connection stays open while the files are looked at: closing it removes the
    # WAL files (a dropped connection could close between listing one and reading it)
    conn = store.open_store(f).conn
    try:
        conn.execute("PRAGMA journal_mode").fetchone()
        files = list(d.iterdir())
        assert f in files
        for p in files:
            assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, p
    finally:
        conn.close()
    # a folder others can read is not used, and the reason names no path
    os.chmod(d, 0o755)
    with pytest.raises(store.StoreUnavailable) as e:
        store.private_dir(d)
    assert str(tmp_path) not in str(e.value)
    # one notebook's file is never another's; the name carries no path
    assert store.db_file(d, "/home/u/a.ipynb") != store.db_file(d, "/home/u/b.ipynb")
    assert "a.ipynb" not in store.db_file(d, "/home/u/a.ipynb").name


WRITER = textwrap.dedent(
    """
    import sys, time
    from array import array
    from pathlib import Path
    from jupyterlab_torchdbg.kernel.record import store
    from jupyterlab_torchdbg.kernel.record.writer import Writer
    conn = store.open_store(Path(sys.argv[1])).conn
    kid = sys.argv[2]
    conn.execute("INSERT INTO kernels(id, pid, started) VALUES (?, 1, 1)", (kid,))
    w = Writer(conn, kid, lambda: {}, lambda s: None)
    step = 0
    while True:
        xs = array("d", range(step, step + 200))
        ys = array("f", [float(v) for v in range(step, step + 200)])
        header = {"id": 1, "count": 200, "run": 1, "names": ["loss"]}
        bufs = [memoryview(xs).cast("B"), memoryview(ys).cast("B")]
        w.observe({"method": "series", "blocks": [header]}, bufs)
        w.flush()
        step += 200
        print(step, flush=True)
    """
)


def test_r50_a_writer_killed_mid_write_leaves_a_whole_database(tmp_path: Path) -> None:
    path = tmp_path / "nb.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for i in range(6):
        kid = f"{i:016x}"
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), kid],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert proc.stdout is not None
        committed = 0
        deadline = time.monotonic() + 0.3 + 0.15 * i
        while time.monotonic() < deadline:
            committed = int(proc.stdout.readline() or committed)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # the writer went on between the deadline and the kill: what it reported then is
        # still in the pipe (a line cut by the kill is not a report)
        for line in proc.stdout:
            if line.endswith("\n"):
                committed = int(line)
        proc.stdout.close()
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        last, n, distinct = conn.execute(
            "SELECT MAX(x), COUNT(*), COUNT(DISTINCT x) FROM points WHERE kernel=?", (kid,)
        ).fetchone()
        # every flush the writer reported is there (the series is thinned past its cap,
        # so its newest point is the proof); at most the flush in progress is lost, and
        # never half of one: no point twice
        assert committed > 0 and last is not None
        stride = 2 * committed / store.SERIES_CAP + 200  # the thinning's step, one flush
        assert committed - stride < last < committed + stride, (last, committed)
        assert n == distinct <= store.SERIES_CAP
        conn.close()
    opened = store.open_store(path)
    assert opened.note is None


def test_a_notebook_renamed_while_its_kernel_ran_keeps_its_record(tmp_path: Path) -> None:
    """Born Untitled.ipynb, renamed, then the kernel died: the restarted kernel (same
    Jupyter kernel id, the new name) finds the record under the new name."""
    d = tmp_path / "records"
    store.private_dir(d)
    old_file = store.db_file(d, "/nb/Untitled.ipynb")
    first = store.open_store(old_file).conn
    assert store.follow_rename(d, old_file, "k-1", first) == 0
    first.execute("INSERT INTO kernels(id, session, started) VALUES ('aaaaaaaaaaaaaaaa', 'k-1', 1)")
    first.execute("INSERT INTO kernels(id, session, started) VALUES ('bbbbbbbbbbbbbbbb', 'k-2', 2)")
    first.execute("INSERT INTO points VALUES ('aaaaaaaaaaaaaaaa', 1, 'loss', 1, 0.5)")
    first.execute("INSERT INTO runs VALUES ('aaaaaaaaaaaaaaaa', 1, '{\"id\": 1}')")
    new_file = store.db_file(d, "/nb/train.ipynb")
    second = store.open_store(new_file).conn
    assert store.follow_rename(d, new_file, "k-1", second) == 1
    assert [r[0] for r in second.execute("SELECT id FROM kernels")] == ["aaaaaaaaaaaaaaaa"]
    assert second.execute("SELECT COUNT(*) FROM points").fetchone()[0] == 1
    # gone from the old file; another Jupyter kernel's rows stay where they were
    assert [r[0] for r in first.execute("SELECT id FROM kernels")] == ["bbbbbbbbbbbbbbbb"]
    assert first.execute("SELECT COUNT(*) FROM points").fetchone()[0] == 0
    assert (d / "kernels" / "k-1").read_text() == new_file.name
    assert stat.S_IMODE((d / "kernels").stat().st_mode) == 0o700
    # a kernel without a Jupyter id carries nothing
    assert store.follow_rename(d, new_file, None, second) == 0
