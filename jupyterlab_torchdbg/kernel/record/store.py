"""The run store's file: where it lives, who may read it, its tables and its bounds.

One SQLite database per notebook (R51): the file name is a hash of the notebook's
absolute path (``JPY_SESSION_NAME``, which jupyter-server sets for a kernel it starts for
a notebook, resolved against the kernel's working directory when relative), in a
directory only its owner can enter (0700; files 0600). A kernel opens only its own
notebook's file; a directory or file that is not ours or is readable by others is not
used (the panel says why, without the path).

Why SQLite in WAL mode with ``synchronous=NORMAL`` (R50): it is in the standard library,
a commit is atomic, and a process killed at any moment (SIGKILL, the OOM killer, a
segfault) leaves a database that opens with the last committed transaction. In WAL mode
NORMAL does not fsync each commit: the commit is in the OS page cache, which survives the
death of the process (what we must survive) but not a power loss (the last commits may
then be lost; the file is still consistent). A file that is not a database of ours, of
another schema version, or fails ``PRAGMA quick_check`` is renamed aside
(``<name>.broken-<time>``) and a fresh one made, with a note: never a crash.

Bounds: the newest ``KEEP_KERNELS`` kernels of a notebook are kept (older ones are
deleted when a kernel opens the file), each kernel writes at most ``MAX_SERIES``
series and ``MAX_ROWS`` points, a series keeps at most ``SERIES_CAP`` points per run
(thinned to every other point when full, like the stream's history), and a file over
``MAX_FILE_BYTES`` loses its oldest kernels first.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import time
from dataclasses import dataclass
from pathlib import Path

#: Schema version in ``PRAGMA user_version``; another number is a foreign file.
SCHEMA_VERSION = 24_002
KEEP_KERNELS = 10
MAX_SERIES = 400
SERIES_CAP = 4000
MAX_ROWS = 400_000
MAX_FILE_BYTES = 64 * 2**20
ENV_DIR = "TORCHDBG_RECORD_DIR"

SCHEMA = """
CREATE TABLE IF NOT EXISTS kernels(
  id TEXT PRIMARY KEY, session TEXT, pid INTEGER, started REAL, last_write REAL,
  end_kind TEXT, end_code INTEGER, end_note TEXT, oom_start INTEGER, oom_kills INTEGER,
  run INTEGER, step INTEGER, mem_used INTEGER, mem_limit INTEGER, mem_per_step REAL,
  exception TEXT, dismissed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS runs(
  kernel TEXT NOT NULL, id INTEGER NOT NULL, info TEXT NOT NULL, PRIMARY KEY(kernel, id));
CREATE TABLE IF NOT EXISTS points(
  kernel TEXT NOT NULL, run INTEGER NOT NULL, name TEXT NOT NULL, x REAL NOT NULL, y REAL);
CREATE INDEX IF NOT EXISTS points_series ON points(kernel, run, name);
CREATE TABLE IF NOT EXISTS alerts(
  kernel TEXT NOT NULL, id TEXT NOT NULL, run INTEGER, body TEXT NOT NULL,
  PRIMARY KEY(kernel, id));
"""


class StoreUnavailable(Exception):
    """The store cannot be used; the message is shown in the panel (no paths)."""


def notebook_path() -> str | None:
    """The notebook this kernel was started for (absolute), or None."""
    name = os.environ.get("JPY_SESSION_NAME")
    if not name:
        return None
    return os.path.abspath(name)


def record_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    try:
        from jupyter_core.paths import jupyter_data_dir

        base = Path(jupyter_data_dir())
    except Exception:
        base = Path.home() / ".local" / "share" / "jupyter"
    return base / "torchdbg" / "records"


def db_file(directory: Path, notebook: str) -> Path:
    """The notebook's own file (R51): a hash of its path, nothing else readable in it."""
    digest = hashlib.sha256(notebook.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return directory / f"{digest}.sqlite"


def private_dir(directory: Path) -> None:
    """Make ``directory`` (0700) or check that it is ours and private (R51)."""
    old = os.umask(0o077)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    finally:
        os.umask(old)
    st = directory.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise StoreUnavailable("the run record's folder is not a folder")
    if st.st_uid != os.getuid():
        raise StoreUnavailable("the run record's folder belongs to another user")
    if st.st_mode & 0o077:
        raise StoreUnavailable(
            "the run record's folder can be read by other users: nothing is recorded "
            f"(make it private with chmod 700, or set {ENV_DIR})"
        )


@dataclass
class Opened:
    conn: sqlite3.Connection
    #: A note for the panel (a file set aside), or None.
    note: str | None


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=5.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


def _fresh(path: Path) -> sqlite3.Connection:
    old = os.umask(0o077)
    try:
        conn = connect(path)
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(SCHEMA)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    finally:
        os.umask(old)
    return conn


def _owned(path: Path) -> None:
    """Refuse a file that is not ours; make ours owner-only (and its WAL files)."""
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            st = p.lstat()
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise StoreUnavailable("the notebook's run record is not a file of this user")
        if st.st_mode & 0o077:
            os.chmod(p, 0o600)


def set_aside(path: Path) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if p.exists():
            os.replace(p, p.with_name(f"{p.name}.broken-{stamp}"))
    return stamp


def open_store(path: Path) -> Opened:
    """Open (or make) the notebook's file; a broken or foreign one is set aside (R50)."""
    note = None
    if path.exists():
        _owned(path)
        problem = None
        try:
            conn = connect(path)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                problem = "it was written by another version"
            elif conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                problem = "it failed SQLite's check"
            else:
                conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as e:
            problem = f"it is not a readable database ({e})"
        if problem is None:
            _owned(path)
            return Opened(conn, None)
        try:
            conn.close()
        except Exception:
            pass
        stamp = set_aside(path)
        note = (
            f"The notebook's earlier run record was set aside ({problem}); "
            f"a new one was started (the old file is kept with the suffix .broken-{stamp})."
        )
    conn = _fresh(path)
    _owned(path)
    return Opened(conn, note)


def prune(conn: sqlite3.Connection, keep: int = KEEP_KERNELS) -> None:
    """Keep the newest ``keep`` kernels; then drop the oldest while the file is too big."""
    ids = [r[0] for r in conn.execute("SELECT id FROM kernels ORDER BY started DESC")]
    for old in ids[keep:]:
        drop_kernel(conn, old)
    ids = ids[:keep]
    while len(ids) > 1 and file_bytes(conn) > MAX_FILE_BYTES:
        drop_kernel(conn, ids.pop())
        conn.execute("PRAGMA incremental_vacuum")


def drop_kernel(conn: sqlite3.Connection, kernel: str) -> None:
    conn.execute("BEGIN")
    for table, key in (("points", "kernel"), ("runs", "kernel"), ("alerts", "kernel")):
        conn.execute(f"DELETE FROM {table} WHERE {key}=?", (kernel,))
    conn.execute("DELETE FROM kernels WHERE id=?", (kernel,))
    conn.execute("COMMIT")


def file_bytes(conn: sqlite3.Connection) -> int:
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int(pages) * int(size)


def jupyter_kernel_id() -> str | None:
    """The id jupyter-server knows this kernel by (from its connection file name): the
    same for the kernel it restarts after a death, whatever the notebook is called now."""
    try:
        from ipykernel.connect import get_connection_file

        name = os.path.basename(get_connection_file())
    except Exception:
        return None
    if name.startswith("kernel-") and name.endswith(".json"):
        kid = name[len("kernel-") : -len(".json")]
        if kid and all(c in "0123456789abcdef-" for c in kid) and len(kid) <= 64:
            return kid
    return None


def follow_rename(
    directory: Path, path: Path, session: str | None, conn: sqlite3.Connection
) -> int:
    """Carry this Jupyter kernel's earlier rows over from the file of the notebook's old
    name, then point the kernel id at this file. A notebook renamed while its kernel ran
    (a new notebook is born ``Untitled.ipynb``) keeps its record: the kernel restarted
    after a death has the same id and the new name. Returns the kernels carried over."""
    if not session:
        return 0
    pointers = directory / "kernels"
    old = os.umask(0o077)
    try:
        pointers.mkdir(exist_ok=True, mode=0o700)
    finally:
        os.umask(old)
    pointer = pointers / session
    moved = 0
    try:
        before = pointer.read_text().strip()
    except OSError:
        before = ""
    src = directory / before
    if before and before != path.name and before.endswith(".sqlite") and "/" not in before:
        if src.is_file() and src.stat().st_uid == os.getuid():
            moved = _carry(src, conn, session)
    tmp = pointers / f".{session}.tmp"
    old = os.umask(0o077)
    try:
        tmp.write_text(path.name)
        os.replace(tmp, pointer)
    finally:
        os.umask(old)
    return moved


def _carry(src: Path, conn: sqlite3.Connection, session: str) -> int:
    conn.execute("ATTACH DATABASE ? AS old", (str(src),))
    try:
        if conn.execute("PRAGMA old.user_version").fetchone()[0] != SCHEMA_VERSION:
            return 0
        ids = [r[0] for r in conn.execute("SELECT id FROM old.kernels WHERE session=?", (session,))]
        if not ids:
            return 0
        marks = ",".join("?" * len(ids))
        conn.execute("BEGIN")
        conn.execute(
            f"INSERT OR IGNORE INTO main.kernels SELECT * FROM old.kernels WHERE id IN ({marks})",
            ids,
        )
        for table in ("runs", "points", "alerts"):
            conn.execute(
                f"INSERT INTO main.{table} SELECT * FROM old.{table} WHERE kernel IN ({marks})",
                ids,
            )
            conn.execute(f"DELETE FROM old.{table} WHERE kernel IN ({marks})", ids)
        conn.execute(f"DELETE FROM old.kernels WHERE id IN ({marks})", ids)
        conn.execute("COMMIT")
        return len(ids)
    finally:
        conn.execute("DETACH DATABASE old")
