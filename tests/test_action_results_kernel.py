"""The memory actions' results as a real kernel sends them, each shape at least once.

``WireKernel`` validates every comm message it receives against the schema, an ack's
``result`` against its action's ``x-result`` (``kernel_client.validate_ack_result``): a
reply that drifts from its result schema fails here. One kernel serves the module. CUDA
is faked in the kernel where a shape needs it (``empty_cache`` with device rows: a
recorded allocator; ``record_memory``: a replayed history); the record and export actions
are triggered in test_record_kernel.py and test_export_tensorboard_kernel.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from comm_wire import WireKernel, start_wire_kernel

GiB = 2**30

SNAP = {
    "segments": [
        {
            "blocks": [
                {
                    "state": "active_allocated",
                    "size": 8192,
                    "frames": [{"filename": "/w/train.py", "line": 7, "name": "step"}],
                }
            ]
        }
    ],
    "device_traces": [
        [
            {
                "action": "alloc",
                "size": 8192,
                "frames": [{"filename": "/w/train.py", "line": 7, "name": "step"}],
            },
            {"action": "oom", "size": 0, "frames": []},
        ]
    ],
}


@pytest.fixture(scope="module")
def cwd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("action-results")


@pytest.fixture(scope="module")
def k(cwd: Path) -> Iterator[WireKernel]:
    yield from start_wire_kernel(cwd)


@pytest.fixture(scope="module")
def comm(k: WireKernel) -> str:
    k.run(
        "from jupyterlab_torchdbg.testing import memory_monitor\n"
        "from jupyterlab_torchdbg.kernel.memory import recording as _recording\n"
        "from jupyterlab_torchdbg.kernel.memory.sources import DeviceReading, Reading,"
        " RecordedSource"
    )
    return k.open_comm()


def act(k: WireKernel, comm: str, name: str, args: Any = None) -> dict[str, Any]:
    """The one reply to ``name``: an ack (its result already validated on arrival)."""
    data = {"method": "action", "request_id": uuid.uuid4().hex, "action": name}
    reply = k.request(comm, {**data, "args": {} if args is None else args})
    assert reply["method"] == "ack", reply
    result: dict[str, Any] = reply["result"]
    return result


def test_empty_cache_reports_each_device_before_and_after(k: WireKernel, comm: str) -> None:
    # A CUDA build with CUDA initialised, as far as the handler can tell: torch's flags,
    # a no-op empty_cache, and the allocator's counters (before, then after).
    k.run(
        "_mon = memory_monitor()\n"
        "_saved = (_mon.allocator, torch.version.cuda, torch.cuda.is_initialized,"
        " torch.cuda.empty_cache)\n"
        "def _reading(reserved):\n"
        "    values = dict.fromkeys(('peak', 'active', 'inactive_split', 'alloc_retries',"
        " 'ooms'), 0)\n"
        f"    values.update(allocated={GiB}, reserved=reserved)\n"
        "    return Reading(True, None, [DeviceReading(0, values)])\n"
        f"_mon.allocator = RecordedSource('allocator', [_reading({3 * GiB}), _reading({GiB})])\n"
        "torch.version.cuda = '12.8'\n"
        "torch.cuda.is_initialized = lambda: True\n"
        "torch.cuda.empty_cache = lambda: None"
    )
    try:
        result = act(k, comm, "empty_cache")
    finally:
        k.run(
            "(_mon.allocator, torch.version.cuda, torch.cuda.is_initialized,"
            " torch.cuda.empty_cache) = _saved"
        )
    (row,) = result["devices"]
    assert row["device"] == "cuda:0" and row["allocated_before"] == row["allocated_after"] == GiB
    assert row["reserved_after"] == GiB
    # the poller may have read the first reading already: then nothing was freed
    assert result["freed_bytes"] == row["reserved_before"] - GiB in (0, 2 * GiB)


def test_release_refs_after_a_failed_cell(k: WireKernel, comm: str) -> None:
    k.fail("raise RuntimeError('boom')")
    result = act(k, comm, "release_refs")
    assert "sys.last_traceback" in result["cleared"] and result["devices"] == []
    assert "%debug" in result["note"]


def test_record_memory_start_again_and_stop_with_a_snapshot(
    k: WireKernel, comm: str, cwd: Path
) -> None:
    k.run(f"memory_monitor().recorder.history = _recording.ReplayHistory({SNAP!r})")
    on = act(k, comm, "record_memory", {"op": "start", "max_entries": 5000})
    assert on["state"] == "on" and on["max_entries"] == 5000 and "note" not in on
    again = act(k, comm, "record_memory", {"op": "start"})
    assert again["state"] == "on" and again["note"] == "already recording"
    stop = act(k, comm, "record_memory", {"op": "stop"})
    assert stop["state"] == "off" and (cwd / stop["file"]).is_file()
    assert stop["entries"] == 2 and stop["oom_events"] == 1
    assert [s["line"] for s in stop["top_sites"]] == [7] == [s["line"] for s in stop["live_sites"]]


def test_record_memory_armed_then_stopped_before_cuda(k: WireKernel, comm: str) -> None:
    k.run(
        "class _NotYet(_recording.ReplayHistory):\n"
        "    def initialized(self):\n"
        "        return False\n"
        "    def when_initialized(self, fn):\n"
        "        pass\n"
        f"memory_monitor().recorder.history = _NotYet({SNAP!r})"
    )
    armed = act(k, comm, "record_memory", {"op": "start"})
    assert armed["state"] == "armed" and armed["since"] is None and armed["note"]
    nothing = act(k, comm, "record_memory", {"op": "stop"})
    assert nothing["state"] == "off" and "file" not in nothing and nothing["note"]


def test_save_checkpoint_measure_activations_and_the_guard(k: WireKernel, comm: str) -> None:
    k.run(
        "import torch.nn as nn\nmodel = nn.Linear(4, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model(torch.randn(3, 4)).sum().backward(); opt.step()"
    )
    try:
        saved = act(k, comm, "save_checkpoint")
        assert saved["models"] == ["model"] and saved["optimizers"] == ["opt"]
        assert saved["file"].endswith(".pt") and saved["bytes"] > 0 and not saved["overwritten"]
        measured = act(k, comm, "measure_activations")
        assert measured["state"] in ("armed", "done", "failed")
        guard = act(k, comm, "set_memory_guard", {"pause_at": None})
        assert guard["guard"]["pause_at"] is None
    finally:
        k.run("del model, opt")


def test_measure_activations_with_nothing_to_measure_fails_in_its_result(
    k: WireKernel, comm: str
) -> None:
    assert act(k, comm, "measure_activations") == {"state": "failed"}
