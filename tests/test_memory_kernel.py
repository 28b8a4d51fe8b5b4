"""The memory feature in a real ipykernel: release references frees what a failed cell's
traceback holds (R23), the actions' ack/error paths over a real comm (R13, R14), CUDA
never initialised by sampling (R02), and the OOM autopsy linked to its exception.

One kernel serves the module (torch imported, extension loaded, one comm open).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _exc_helpers import SyncKernel, start_kernel

OOM_TEXT = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has "
    "77.90 GiB memory in use. Of the allocated memory 70.10 GiB is allocated by PyTorch, "
    "and 6.50 GiB is reserved by PyTorch but unallocated."
)


@pytest.fixture(scope="module")
def cwd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mem-kernel")


@pytest.fixture(scope="module")
def k(cwd: Path) -> Iterator[SyncKernel]:
    gen = start_kernel(cwd)
    kern = next(gen)
    kern.run("import torch\nimport torch.nn as nn\n%load_ext jupyterlab_torchdbg")
    kern.comm_id = kern.open_comm()  # type: ignore[attr-defined]
    yield kern
    gen.close()


def send(
    k: SyncKernel,
    action: str,
    args: Any = None,
    request_id: str | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Send an action with arguments; return its one reply (ack or error)."""
    rid = request_id or uuid.uuid4().hex
    data = {"method": "action", "request_id": rid, "action": action, "args": args or {}}
    comm_id = k.comm_id  # type: ignore[attr-defined]
    n0 = len(k.comm)
    k.kc.shell_channel.send(k.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data}))
    deadline = time.monotonic() + timeout
    while True:
        hits = [d for c, d in k.comm[n0:] if c == comm_id and d.get("request_id") == rid]
        if hits:
            return hits[-1]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no reply to {action}")
        k.pump(0.1)


def replies(k: SyncKernel, rid: str) -> list[dict[str, Any]]:
    k.pump(0.3)
    return [d for _, d in k.comm if d.get("request_id") == rid]


# --- R23 -----------------------------------------------------------------------------------------


def test_r23_release_refs_frees_a_tensor_held_only_by_the_traceback(k: SyncKernel) -> None:
    k.fail(
        "import weakref\n"
        "def holds_big():\n"
        "    big = torch.zeros(4_000_000)  # 16 MB, only in this frame\n"
        "    global ref\n"
        "    ref = weakref.ref(big)\n"
        "    raise RuntimeError('boom')\n"
        "holds_big()"
    )
    # sys.last_traceback keeps the frame (and `big`) alive for %debug.
    assert k.run("import gc; gc.collect(); print(ref() is not None)").stdout.strip() == "True"
    reply = send(k, "release_refs")
    assert reply["method"] == "ack", reply
    result = reply["result"]
    assert {"sys.last_traceback", "sys.last_value", "InteractiveTB.tb"} <= set(result["cleared"])
    assert "%debug" in result["note"] and "no longer possible" in result["note"]
    assert result["rss_before"] > 0 and result["devices"] == []  # CPU only: no CUDA rows
    assert k.run("print(ref() is None)").stdout.strip() == "True"
    dbg = k.execute("%debug")
    assert "No traceback" in dbg.stdout + dbg.stderr + str(dbg.errors)


# --- R13 / R14 over a real comm -----------------------------------------------------------------


def test_r13_r14_memory_actions_ack_or_error_once_each(k: SyncKernel, cwd: Path) -> None:
    cpu = send(k, "empty_cache")
    assert (cpu["method"], cpu["code"]) == ("error", "refused") and "CPU-only" in cpu["message"]
    rec = send(k, "record_memory", {"op": "start"})
    assert rec["code"] == "refused" and "CUDA" in rec["message"]
    bad = send(k, "record_memory", {"op": "start", "max_entries": 1e308})
    assert bad["code"] == "invalid_args"
    assert send(k, "record_memory", {"op": "rewind"})["code"] == "invalid_args"
    assert send(k, "empty_cache", {"device": 0})["code"] == "invalid_args"
    assert send(k, "empty_caches")["code"] == "unknown_action"
    for name in ("../escape.pt", "/tmp/abs.pt", "sub/dir.pt", "run.pkl"):
        r = send(k, "save_checkpoint", {"filename": name})
        assert r["code"] == "invalid_args", name

    k.run(
        "model = nn.Linear(4, 2)\nopt = torch.optim.Adam(model.parameters())\n"
        "model(torch.randn(3, 4)).sum().backward(); opt.step()"
    )
    rid = uuid.uuid4().hex
    ok = send(k, "save_checkpoint", {"filename": "first.pt"}, request_id=rid)
    assert ok["method"] == "ack" and ok["result"]["file"] == "first.pt"
    dup = send(k, "save_checkpoint", {"filename": "first.pt"}, request_id=rid)
    assert dup["method"] == "ack" and dup["duplicate"] is True
    assert len(replies(k, rid)) == 2  # one per request; the second is marked duplicate
    again = send(k, "save_checkpoint", {"filename": "first.pt"})
    assert again["code"] == "refused" and "already exists" in again["message"]
    assert (cwd / "first.pt").is_file()
    loaded = k.run(
        "sd = torch.load('first.pt', weights_only=True)\n"
        "print(sorted(sd['models']), sorted(sd['optimizers']))"
    )
    assert loaded.stdout.strip() == "['model'] ['opt']"


# --- R02 ------------------------------------------------------------------------------------------


def test_r02_training_and_sampling_never_initialise_cuda(k: SyncKernel) -> None:
    n0 = len(k.comm)
    k.run(
        "import time\n"
        "net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))\n"
        "sgd = torch.optim.SGD(net.parameters(), lr=0.01)\n"
        "t0 = time.monotonic()\n"
        "while time.monotonic() - t0 < 1.5:  # long enough for the poller (2 Hz)\n"
        "    sgd.zero_grad(); net(torch.randn(16, 8)).pow(2).mean().backward(); sgd.step()\n"
    )
    assert k.run("print(torch.cuda.is_initialized())").stdout.strip() == "False"
    k.pump(0.5)
    mine = [d for _, d in k.comm[n0:]]
    status = [d for d in mine if d.get("method") == "memory"][-1]
    assert status["state"] == "no_cuda" and status["devices"] == []
    cpu = status["breakdown"]["devices"][0]
    assert cpu["device"] == "cpu" and cpu["parameters"] > 0 and cpu["gradients"] > 0
    # names go out once per block id (any comm's snapshot or first series has them)
    table = {
        b["id"]: b["names"]
        for _, d in k.comm
        if d.get("method") in ("snapshot", "series")
        for b in d["blocks"]
        if "names" in b
    }
    streamed = {
        n for d in mine if d.get("method") == "series" for b in d["blocks"] for n in table[b["id"]]
    }
    assert "mem/cpu/rss" in streamed


# --- the OOM autopsy ---------------------------------------------------------------------------


def test_oom_autopsy_in_a_real_kernel_links_its_exception_and_replays(k: SyncKernel) -> None:
    n0 = len(k.comm)
    ex = k.fail(
        "def step():\n"
        "    activations = torch.zeros(512, 512)\n"
        f"    raise torch.cuda.OutOfMemoryError({OOM_TEXT!r})\n"
        "step()",
        cell_id="cell-oom",
    )
    k.pump(0.5)
    (oom,) = [d for _, d in k.comm[n0:] if d.get("method") == "oom"]
    assert oom["exception_id"] == ex["id"] and oom["cell_id"] == "cell-oom"
    assert oom["requested_bytes"] == 2 * 2**30
    assert [r["kind"] for r in oom["remedies"]][:2] == ["fragmentation", "activations"]
    assert oom["remedies"][-1]["kind"] == "release_refs"
    assert k.run("print(torch.cuda.is_initialized())").stdout.strip() == "False"
    late = k.open_comm()
    replay = [d for c, d in k.comm if c == late and d.get("method") == "oom"]
    assert len(replay) == 1 and replay[0]["replay"] is True and replay[0]["id"] == oom["id"]
