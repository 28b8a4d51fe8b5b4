"""Exception diagnosis on a real CUDA device (skipped without one).

The classic `expected device cuda:0 but found device cpu` family, a real OOM, and a real
device-side assert (in a child process: it corrupts that process's CUDA context, R22).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

from jupyterlab_torchdbg.kernel.exceptions.capture import capture  # noqa: E402


def diagnose_call(fn: Any) -> dict[str, Any]:
    try:
        fn()
    except BaseException as e:
        return capture(e)["diagnosis"]
    raise AssertionError("did not raise")


def test_cuda_model_cpu_input_names_both_devices() -> None:
    def cell() -> None:
        model = torch.nn.Linear(10, 5).to("cuda:0")
        labels = torch.randn(4, 10)  # forgot .to(device)
        model(labels)

    d = diagnose_call(cell)
    assert d["category"] == "device_mismatch"
    by = {c["name"]: c for c in d["culprits"]}
    assert by["labels"]["device"] == "cpu"
    assert by["model"]["devices"] == ["cuda:0"]
    assert "`labels` is on cpu" in d["headline"]
    assert "`model` parameters are on cuda:0" in d["headline"]
    assert "labels = labels.to('cuda:0')" in d["remedy"]


def test_loss_on_cuda_with_cpu_labels() -> None:
    def cell() -> None:
        logits = torch.randn(4, 3, device="cuda:0")
        target = torch.tensor([0, 1, 2, 1])
        torch.nn.functional.cross_entropy(logits, target)

    d = diagnose_call(cell)
    assert d["category"] == "device_mismatch"
    assert {c["name"]: c["device"] for c in d["culprits"]} == {
        "logits": "cuda:0",
        "target": "cpu",
    }


def test_real_oom_parsed_and_largest_tensor_named() -> None:
    free, total = torch.cuda.mem_get_info()
    held = [torch.empty(int(free * 0.5), dtype=torch.uint8, device="cuda")]

    def cell() -> None:
        ballast = held[0]  # noqa: F841 - the named culprit
        torch.empty(int(total * 2), dtype=torch.uint8, device="cuda")

    try:
        d = diagnose_call(cell)
    finally:
        held.clear()
        torch.cuda.empty_cache()
    assert d["category"] == "out_of_memory"
    assert d["facts"]["device"].startswith("cuda:")
    requested = d["facts"]["requested_bytes"]
    assert requested is not None and abs(requested - total * 2) / (total * 2) < 0.01
    assert d["culprits"][0]["name"] == "ballast"
    assert "over half the device" in d["remedy"]


DEVICE_ASSERT = textwrap.dedent(
    """
    import json, torch
    import torch.nn.functional as F
    from jupyterlab_torchdbg.kernel.exceptions.capture import capture
    def step():
        logits = torch.randn(4, 10, device="cuda")
        labels = torch.tensor([0, 1, 10, 3], device="cuda")
        loss = F.cross_entropy(logits, labels)
        torch.cuda.synchronize()
    try:
        step()
    except Exception as e:
        d = capture(e)["diagnosis"]
        print(json.dumps({"d": d, "init": torch.cuda.is_initialized()}))
    """
)


def test_r22_real_device_side_assert_in_child_process() -> None:
    out = subprocess.run(
        [sys.executable, "-c", DEVICE_ASSERT], capture_output=True, text=True, timeout=300
    )
    line = out.stdout.strip().splitlines()[-1]
    d = json.loads(line)["d"]
    assert d["category"] in ("device_side_assert", "cuda_error"), out.stderr[-2000:]
    assert d["facts"]["sticky"] is True
    assert "CUDA_LAUNCH_BLOCKING=1" in d["remedy"]
