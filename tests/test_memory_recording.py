"""Memory history (``record_memory``) without a GPU: the top allocation sites summarised
from a synthetic snapshot shaped like ``torch.cuda.memory._snapshot()`` (segments →
blocks with size/state/frames, device_traces), the snapshot file, the summary kept in the
``memory`` status for every panel (R05, R06), bounded payloads (R09), no home directory in
them (S6), the file not world-readable (S6); and the public lookup of an exception by its
execution count that links an OOM autopsy to its exception."""

from __future__ import annotations

import errno
import os
import pickle
import sysconfig
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from grads_support import session
from jsonschema import Draft202012Validator

from jupyterlab_torchdbg.kernel import extension
from jupyterlab_torchdbg.kernel.action_registry import ActionError
from jupyterlab_torchdbg.kernel.memory.recording import (
    SITE_TEXT_CHARS,
    HistoryRecorder,
    ReplayHistory,
    TorchHistory,
    top_sites,
)
from jupyterlab_torchdbg.protocol import jsonable, load_schema
from jupyterlab_torchdbg.testing import exception_monitor, memory_monitor

MiB = 2**20
STDLIB = sysconfig.get_paths()["stdlib"]
TORCH_LINEAR = "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"


def validate(defn: str, data: Any) -> None:
    defs = load_schema()["$defs"]
    Draft202012Validator({"$defs": defs, "$ref": f"#/$defs/{defn}"}).validate(data)


def frame(filename: str, line: int, name: str) -> dict[str, Any]:
    return {"filename": filename, "line": line, "name": name}


def row(file: str, line: int, function: str, nbytes: int, count: int) -> dict[str, Any]:
    return {"file": file, "line": line, "function": function, "bytes": nbytes, "count": count}


# Innermost frame first, as torch records them: torch's own layers, then the user's line.
FORWARD = [
    frame(TORCH_LINEAR, 125, "forward"),
    frame("/home/alice/project/model.py", 42, "forward"),
    frame("/home/alice/project/train.py", 10, "<module>"),
]
DATALOAD = [
    frame(f"{STDLIB}/copy.py", 150, "deepcopy"),
    frame("/home/alice/project/data.py", 7, "load_batch"),
]
ONLY_TORCH = [frame(TORCH_LINEAR, 125, "forward")]


def synthetic_snapshot() -> dict[str, Any]:
    """``torch.cuda.memory._snapshot()``'s shape, with made-up numbers."""
    return {
        "segments": [
            {
                "device": 0,
                "address": 0x7F0000000000,
                "total_size": 64 * MiB,
                "allocated_size": 40 * MiB,
                "segment_type": "large",
                "frames": FORWARD,
                "blocks": [
                    {"size": 32 * MiB, "state": "active_allocated", "frames": FORWARD},
                    {"size": 8 * MiB, "state": "active_allocated", "frames": DATALOAD},
                    {"size": 16 * MiB, "state": "inactive", "frames": FORWARD},
                    {"size": 8 * MiB, "state": "active_pending_free", "frames": DATALOAD},
                ],
            },
            {
                "device": 0,
                "address": 0x7F1000000000,
                "total_size": 2 * MiB,
                "allocated_size": 1 * MiB,
                "segment_type": "small",
                "blocks": [
                    {"size": MiB // 2, "state": "active_allocated", "frames": DATALOAD},
                    {"size": MiB // 2, "state": "active_allocated", "frames": []},
                ],
            },
        ],
        "device_traces": [
            [
                {"action": "segment_alloc", "size": 64 * MiB, "frames": FORWARD},
                {"action": "alloc", "size": 32 * MiB, "frames": FORWARD},
                {"action": "alloc", "size": 16 * MiB, "frames": FORWARD},
                {"action": "free_requested", "size": 16 * MiB, "frames": FORWARD},
                {"action": "free_completed", "size": 16 * MiB, "frames": FORWARD},
                {"action": "alloc", "size": 8 * MiB, "frames": DATALOAD},
                {"action": "alloc", "size": MiB // 2, "frames": DATALOAD},
                {"action": "alloc", "size": 4 * MiB, "frames": ONLY_TORCH},
                {"action": "oom", "size": 1024 * MiB, "frames": FORWARD},
            ],
            [],  # a second device that recorded nothing
        ],
    }


# --- the summary ------------------------------------------------------------------------------


def test_top_sites_sums_bytes_and_counts_per_user_line_largest_first() -> None:
    out = top_sites(synthetic_snapshot())
    assert out["entries"] == 9 and out["oom_events"] == 1
    # every allocation while recording: frees, segment events and the OOM are not allocations
    model_py, data_py = ("project/model.py", 42, "forward"), ("project/data.py", 7, "load_batch")
    assert out["top_sites"] == [
        row(*model_py, 48 * MiB, 2),
        row(*data_py, 8 * MiB + MiB // 2, 2),
        # nothing outside torch in the stack: torch's own innermost frame is the site
        row("modules/linear.py", 125, "forward", 4 * MiB, 1),
    ]
    # still allocated at the stop: only active_allocated blocks; a block without frames is
    # not attributed to anything
    assert out["live_sites"] == [row(*model_py, 32 * MiB, 1), row(*data_py, 8 * MiB + MiB // 2, 2)]
    for site in out["top_sites"] + out["live_sites"]:
        validate("AllocationSite", site)
        assert "alice" not in site["file"] and not site["file"].startswith("/")  # S6


def test_site_skips_torch_and_the_standard_library() -> None:
    out = top_sites(synthetic_snapshot())
    files = [s["file"] for s in out["top_sites"] + out["live_sites"]]
    # the stdlib's deepcopy is not where data.py allocated; torch's Linear is not model.py
    assert not any(f.endswith("copy.py") for f in files)
    assert files.count("modules/linear.py") == 1  # only where no user frame was recorded


def test_r09_sites_are_bounded_in_number_and_length() -> None:
    long_name = "f" * 5000
    deep_path = "/x" * 3000 + "/" + "m" * 4000 + ".py"
    trace = [
        {"action": "alloc", "size": 1000 + i, "frames": [frame(f"/w/site{i}.py", i, "fn")]}
        for i in range(50)
    ]
    trace.append({"action": "alloc", "size": 10**9, "frames": [frame(deep_path, -3, long_name)]})
    out = top_sites({"segments": [], "device_traces": [trace]}, n=10)
    assert len(out["top_sites"]) == 10 and out["live_sites"] == []
    biggest = out["top_sites"][0]
    assert len(biggest["function"]) == SITE_TEXT_CHARS and len(biggest["file"]) <= SITE_TEXT_CHARS
    assert biggest["line"] == 0
    assert [s["bytes"] for s in out["top_sites"][1:]] == [1000 + i for i in range(49, 40, -1)]
    for site in out["top_sites"]:
        validate("AllocationSite", site)


def test_an_empty_or_partial_snapshot_summarises_to_nothing() -> None:
    assert top_sites({}) == {"entries": 0, "oom_events": 0, "live_sites": [], "top_sites": []}
    partial = {"segments": [{"blocks": [{"state": "active_allocated", "size": 5}]}]}
    assert top_sites(partial)["live_sites"] == []  # no frames: no site


# --- start / stop with a replayed history ------------------------------------------------------


def recorder(tmp_path: Any, history: Any = None, corrupted: str | None = None) -> HistoryRecorder:
    return HistoryRecorder(
        lambda: corrupted,
        cwd=lambda: str(tmp_path),
        history=history if history is not None else ReplayHistory(synthetic_snapshot()),
    )


def test_stop_writes_a_private_snapshot_file_and_returns_the_summary(tmp_path: Any) -> None:
    history = ReplayHistory(synthetic_snapshot())
    rec = recorder(tmp_path, history)
    assert rec.status() == {"state": "off", "max_entries": None, "since": None, "last": None}
    started = rec.start(50_000)
    assert started["state"] == "on" and started["max_entries"] == 50_000
    assert history.enabled == 50_000
    assert rec.start(60_000)["note"] == "already recording"
    result = rec.stop()
    assert history.calls == ["enable", "snapshot", "disable"]
    assert result["state"] == "off" and result["max_entries"] is None
    path = tmp_path / result["file"]
    assert result["file"].startswith("torchdbg_memory_") and result["file"].endswith(".pickle")
    assert path.stat().st_size == result["bytes"]
    assert path.stat().st_mode & 0o077 == 0  # not world-readable (S6)
    with open(path, "rb") as f:
        assert pickle.load(f) == synthetic_snapshot()  # what PyTorch's viewer reads
    assert result["top_sites"][0]["file"] == "project/model.py"
    summary = {k: v for k, v in result.items() if k not in ("state", "max_entries", "since")}
    validate("MemorySnapshotSummary", jsonable(summary))
    # the summary stays in the status, for every panel, until the next stop
    assert rec.status()["last"] == summary
    validate("MemoryRecording", jsonable(rec.status()))
    with pytest.raises(ActionError, match="no memory recording is running"):
        rec.stop()
    rec.start(1_000)
    assert rec.status()["last"] == summary and rec.status()["state"] == "on"


def test_two_stops_in_one_second_never_overwrite_a_snapshot(tmp_path: Any) -> None:
    rec = recorder(tmp_path)
    files = []
    for _ in range(3):
        rec.start(1_000)
        files.append(rec.stop()["file"])
    assert len(set(files)) == 3 and sorted(os.listdir(tmp_path)) == sorted(files)


def test_r45_a_failed_snapshot_write_keeps_recording_and_a_second_stop_writes_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = ReplayHistory(synthetic_snapshot())
    rec = recorder(tmp_path, history)
    rec.start(1_000)

    def disk_full(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        f.write(b"half a snap")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pickle, "dump", disk_full)
    with pytest.raises(ActionError, match=r"No space left on device.*still recording") as err:
        rec.stop()
    assert err.value.code == "failed"
    assert os.listdir(tmp_path) == []  # the partial file is removed
    assert str(tmp_path) not in str(err.value)  # no paths in payloads (S6)
    # still recording: the history was never switched off, nothing was lost
    assert rec.status()["state"] == "on" and history.enabled == 1_000
    assert history.calls == ["enable", "snapshot"] and rec.status()["last"] is None
    monkeypatch.undo()
    result = rec.stop()
    assert history.calls == ["enable", "snapshot", "snapshot", "disable"]
    assert result["state"] == "off" and os.listdir(tmp_path) == [result["file"]]
    with open(tmp_path / result["file"], "rb") as f:
        assert pickle.load(f) == synthetic_snapshot()


def test_r45_a_missing_directory_is_reported_and_the_recording_kept(tmp_path: Any) -> None:
    history = ReplayHistory(synthetic_snapshot())
    rec = HistoryRecorder(lambda: None, cwd=lambda: str(tmp_path / "gone"), history=history)
    rec.start(1_000)
    with pytest.raises(ActionError, match="No such file or directory"):
        rec.stop()
    assert rec.status()["state"] == "on" and "disable" not in history.calls


def test_armed_before_cuda_then_stopped_records_nothing(tmp_path: Any) -> None:
    class NotYetInitialised(ReplayHistory):
        def __init__(self, snap: dict[str, Any]) -> None:
            super().__init__(snap)
            self.queued: list[Any] = []

        def initialized(self) -> bool:
            return False

        def when_initialized(self, fn: Any) -> None:
            self.queued.append(fn)

        def cancel(self, fn: Any) -> None:
            self.queued.remove(fn)

    history = NotYetInitialised(synthetic_snapshot())
    rec = recorder(tmp_path, history)
    assert rec.start(1_000)["state"] == "armed" and len(history.queued) == 1
    stopped = rec.stop()
    assert stopped["state"] == "off" and "never used" in stopped["note"]
    assert history.queued == [] and history.calls == [] and os.listdir(tmp_path) == []
    assert rec.status()["last"] is None


def test_r22_refused_after_a_sticky_cuda_error(tmp_path: Any) -> None:
    rec = recorder(tmp_path, corrupted="CUDA context is corrupted — restart the kernel.")
    with pytest.raises(ActionError, match="corrupted"):
        rec.start(1_000)


def test_the_real_history_refuses_a_cpu_only_torch() -> None:
    assert not torch.version.cuda  # the CPU build CI has
    with pytest.raises(ActionError, match="CPU-only"):
        TorchHistory().check()


def test_r05_r06_stop_action_acks_the_summary_and_every_status_carries_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with session({}) as s:
        mon = memory_monitor()
        assert mon is not None
        mon.recorder.history = ReplayHistory(synthetic_snapshot())
        assert s.comm.action("record_memory", {"op": "start"})["result"]["state"] == "on"
        assert s.comm.messages("memory")[-1]["recording"]["state"] == "on"
        ack = s.comm.action("record_memory", {"op": "stop"})
        assert ack["method"] == "ack"
        result = ack["result"]
        assert (tmp_path / result["file"]).exists()
        # the status broadcast right after the stop carries the same summary (FakeComm
        # validates every message against the schema as it is sent)
        last = s.comm.messages("memory")[-1]["recording"]["last"]
        assert last["file"] == result["file"] and last["top_sites"] == result["top_sites"]
        assert last["live_sites"][0]["bytes"] == 32 * MiB
        # a panel opened later gets it in its snapshot
        (status,) = [m for m in mon.snapshot_messages() if m["method"] == "memory"]
        assert status["recording"]["last"]["file"] == result["file"]
        assert s.ext.errors == {}


# --- the exception lookup the OOM autopsy uses -------------------------------------------------


def test_exception_id_is_public_and_matches_only_the_same_execution() -> None:
    assert extension.current() is None
    with session({}) as s:
        monitor = exception_monitor()
        assert monitor is not None
        assert monitor.exception_id(3) is None  # nothing failed yet
        try:
            raise ValueError("boom")
        except ValueError as e:
            exc = e
        result = SimpleNamespace(
            error_in_exec=exc,
            error_before_exec=None,
            execution_count=3,
            info=SimpleNamespace(cell_id="c3", raw_cell="", transformed_cell=""),
        )
        s.shell.events.trigger("post_run_cell", result)
        (ex,) = s.comm.messages("exception")
        assert monitor.exception_id(3) == ex["id"]
        assert monitor.exception_id(4) is None  # a stale exception is not linked
        del exc, result
    assert extension.current() is None  # unload forgets it (R01)
