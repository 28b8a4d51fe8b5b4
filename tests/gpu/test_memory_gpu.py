"""The memory feature on a real CUDA device (skipped without one).

One real kernel runs the module in order: before CUDA starts (NVML cards, an armed
recording, CUDA_VISIBLE_DEVICES in UUID form set in a cell still taking effect: R02, R38),
then a real OOM whose autopsy names the culprit tensor, then release references and empty
cache bringing allocated memory back to the baseline (R23), then the UUID mapping once CUDA
is initialised (R38). A last test maps the machine's NVML devices in-process.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

GiB = 2**30


@pytest.fixture(scope="module")
def cwd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mem-gpu")


@pytest.fixture(scope="module")
def k(cwd: Path) -> Iterator[Any]:
    from _exc_helpers import start_kernel  # imported lazily: collects without CUDA

    gen = start_kernel(cwd)
    kern = next(gen)
    kern.run("import torch, os, json\nimport torch.nn as nn\n%load_ext jupyterlab_torchdbg")
    kern.comm_id = kern.open_comm()
    yield kern
    gen.close()


def send(k: Any, action: str, args: Any = None, timeout: float = 60.0) -> dict[str, Any]:
    rid = uuid.uuid4().hex
    data = {"method": "action", "request_id": rid, "action": action, "args": args or {}}
    n0 = len(k.comm)
    k.kc.shell_channel.send(k.kc.session.msg("comm_msg", {"comm_id": k.comm_id, "data": data}))
    deadline = time.monotonic() + timeout
    while True:
        hits = [d for _, d in k.comm[n0:] if d.get("request_id") == rid]
        if hits:
            return hits[-1]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no reply to {action}")
        k.pump(0.1)


def status(k: Any) -> dict[str, Any]:
    k.pump(0.3)
    return [d for c, d in k.comm if c == k.comm_id and d.get("method") == "memory"][-1]


def value(k: Any, expr: str) -> Any:
    return json.loads(k.run(f"print(json.dumps({expr}))").stdout.strip())


def test_r02_r38_before_cuda_starts(k: Any) -> None:
    k.run(
        "import pynvml\npynvml.nvmlInit()\n"
        "_u = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))\n"
        "nvml_uuid = _u.decode() if isinstance(_u, bytes) else _u"
    )
    nvml_uuid = value(k, "nvml_uuid")
    # Set in a later cell, in UUID form: must still decide which GPU torch uses (R02).
    k.run(f"os.environ['CUDA_VISIBLE_DEVICES'] = {nvml_uuid!r}")
    k.run(
        "net = nn.Linear(8, 8)\nopt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "for _ in range(50):\n    opt.zero_grad(); net(torch.randn(4, 8)).sum().backward(); "
        "opt.step()\ntime_ = __import__('time'); time_.sleep(1.2)"
    )
    assert value(k, "torch.cuda.is_initialized()") is False
    st = status(k)
    assert st["state"] == "cuda_idle" and st["nvml"]["available"] is True
    (card,) = st["devices"]
    assert card["matched_by"] == "uuid" and card["uuid"] == nvml_uuid
    assert card["nvml"]["total"] > 0 and card["allocator"] is None
    refused = send(k, "empty_cache")
    assert refused["code"] == "refused" and "not initialised" in refused["message"]
    armed = send(k, "record_memory", {"op": "start", "max_entries": 50_000})
    assert armed["result"]["state"] == "armed"
    assert value(k, "torch.cuda.is_initialized()") is False
    # The user's code starts CUDA: the queued recording starts with it.
    k.run("x = torch.ones(1024, 1024, device='cuda')\ny = x @ x")
    assert status(k)["recording"]["state"] == "on"
    assert card["name"]  # from NVML before CUDA started
    stop = send(k, "record_memory", {"op": "stop"})
    assert stop["method"] == "ack", stop
    res = stop["result"]
    assert res["file"].endswith(".pickle") and res["bytes"] > 0 and res["entries"] > 0
    assert res["top_sites"] and res["top_sites"][0]["bytes"] >= 4 * 1024 * 1024
    assert value(k, f"os.path.getsize({res['file']!r}) > 0") is True


def test_real_oom_autopsy_names_the_culprit(k: Any) -> None:
    n0 = len(k.comm)
    k.run("culprit = torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda')")
    ex = k.fail(
        "def step():\n"
        "    act = torch.empty(2**29, dtype=torch.uint8, device='cuda')\n"
        "    total = torch.cuda.get_device_properties(0).total_memory\n"
        "    return torch.empty(total * 2, dtype=torch.uint8, device='cuda')\n"
        "step()",
        cell_id="oom-cell",
    )
    k.pump(1.0)
    (oom,) = [d for _, d in k.comm[n0:] if d.get("method") == "oom"]
    assert oom["exception_id"] == ex["id"] and oom["device"] == "cuda:0"
    total = value(k, "torch.cuda.get_device_properties(0).total_memory")
    assert abs(oom["requested_bytes"] - 2 * total) / (2 * total) < 0.01
    names = [t["name"] for t in oom["tensors"]]
    assert names[0] == "culprit" and oom["tensors"][0]["nbytes"] == 2 * GiB
    act = next(t for t in oom["tensors"] if t["name"] == "act")
    assert act["where"] == "frame" and act["function"] == "step"
    assert oom["allocator"]["allocated"] >= 2 * GiB + 2**29
    assert "memory summary" in (oom["summary"] or "").lower()
    assert oom["remedies"][0]["kind"] == "huge_allocation"
    assert status(k)["last_oom"]["id"] == oom["id"]


def test_r23_release_refs_and_empty_cache_return_to_baseline(k: Any) -> None:
    k.run("del culprit, x, y\nimport gc; gc.collect()")
    send(k, "release_refs")  # the OOM's traceback held `act`
    baseline = value(k, "torch.cuda.memory_allocated()")
    k.fail(
        "def holds():\n"
        "    big = torch.empty(2**30, dtype=torch.uint8, device='cuda')  # only in this frame\n"
        "    raise RuntimeError('boom')\n"
        "holds()"
    )
    assert value(k, "torch.cuda.memory_allocated()") >= baseline + GiB
    reply = send(k, "release_refs")
    assert reply["method"] == "ack", reply
    (dev,) = reply["result"]["devices"]
    assert dev["allocated_before"] >= baseline + GiB
    assert dev["allocated_after"] == baseline
    assert dev["reserved_after"] <= dev["reserved_before"] - GiB  # the cache was emptied too
    assert value(k, "torch.cuda.memory_allocated()") == baseline
    k.run("z = torch.empty(2**28, dtype=torch.uint8, device='cuda'); del z")
    cached = send(k, "empty_cache")
    assert cached["method"] == "ack"
    (row,) = cached["result"]["devices"]
    assert row["reserved_after"] <= row["reserved_before"] - 2**28
    assert cached["result"]["freed_bytes"] >= 2**28


def test_r38_once_initialised_devices_match_by_uuid(k: Any) -> None:
    st = status(k)
    assert st["state"] == "active"
    (card,) = st["devices"]
    torch_uuid = value(k, "str(torch.cuda.get_device_properties(0).uuid)")
    assert card["matched_by"] == "uuid"
    assert card["uuid"].removeprefix("GPU-").removeprefix("MIG-") == torch_uuid.removeprefix("GPU-")
    assert card["allocator"]["reserved"] >= card["allocator"]["allocated"]
    assert card["nvml"]["used"] is not None or "used" in card["unavailable"]


def test_r38_real_nvml_devices_map_by_uuid_form_and_index() -> None:
    from jupyterlab_torchdbg.kernel.capabilities import Nvml
    from jupyterlab_torchdbg.kernel.memory.sources import NvmlSource, map_devices

    nvml = Nvml()
    if not nvml.init():
        pytest.skip(f"NVML unavailable: {nvml.reason}")
    try:
        devices = NvmlSource(nvml).devices()
        assert devices and all(d["uuid"] for d in devices)
        last = devices[-1]
        (m,) = map_devices(devices, visible=last["uuid"][:12], order=None)
        assert (m.nvml_index, m.matched_by) == (last["index"], "uuid")
        (m,) = map_devices(devices, visible=str(last["index"]), order="PCI_BUS_ID")
        assert m.nvml_index == last["index"]
    finally:
        nvml.shutdown()
