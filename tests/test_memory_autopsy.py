"""OOM autopsy without a GPU: a raised ``torch.cuda.OutOfMemoryError`` with a real message,
remedies chosen from the numbers, culprits named from the namespace and the failing
frames, no GPU call and no reference kept (R23)."""

from __future__ import annotations

import gc
import sys
import weakref
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn as nn
from grads_support import session
from kernel_client import validate_kernel_message

from jupyterlab_torchdbg.kernel.memory import autopsy
from jupyterlab_torchdbg.kernel.memory import breakdown as bd
from jupyterlab_torchdbg.kernel.memory.sources import (
    DeviceReading,
    Reading,
    RecordedSource,
    TorchAllocatorSource,
)
from jupyterlab_torchdbg.testing import memory_monitor

GiB = 2**30
MiB = 2**20

#: torch 2.x's message, verbatim apart from the numbers.
REAL_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has "
    "77.90 GiB memory in use. Of the allocated memory 70.10 GiB is allocated by PyTorch, "
    "and 6.50 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
    "avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def raised(fn: Any) -> BaseException:
    try:
        fn()
    except BaseException as e:
        return e
    raise AssertionError("did not raise")


def kinds(remedies: list[dict[str, Any]]) -> list[str]:
    return [r["kind"] for r in remedies]


def allocator(**values: int) -> RecordedSource:
    base = dict.fromkeys(("peak", "active", "inactive_split", "alloc_retries", "ooms"), 0)
    return RecordedSource(
        "allocator", [Reading(True, None, [DeviceReading(0, {**base, **values})])]
    )


# --- remedies from the numbers ----------------------------------------------------------------


def numbers(**kw: Any) -> dict[str, Any]:
    n = {
        "device": "cuda:0",
        "requested": 512 * MiB,
        "total": 80 * GiB,
        "allocated": 10 * GiB,
        "reserved": 10 * GiB + 100 * MiB,
        "parameters": 1 * GiB,
        "gradients": 0,
        "optimizer_state": 0,
        "other": 9 * GiB,
    }
    n.update(kw)
    return n


def test_activations_dominate_suggest_batch_amp_checkpointing() -> None:
    r = autopsy.choose_remedies(numbers())
    assert kinds(r) == ["activations", "release_refs"]
    assert "90%" in r[0]["title"] and r[0]["share"] == pytest.approx(0.9)
    for word in ("batch", "torch.autocast", "checkpoint"):
        assert word in r[0]["detail"]


def test_optimizer_state_dominates_suggests_another_optimizer() -> None:
    r = autopsy.choose_remedies(numbers(parameters=2 * GiB, optimizer_state=4 * GiB, other=4 * GiB))
    assert kinds(r)[0] == "optimizer_state" and "2.0x the parameters" in r[0]["title"]
    assert "SGD" in r[0]["detail"] and "8-bit" in r[0]["detail"]


def test_gradients_kept_suggest_set_to_none() -> None:
    r = autopsy.choose_remedies(numbers(parameters=3 * GiB, gradients=3 * GiB, other=4 * GiB))
    assert "gradients_kept" in kinds(r)
    g = next(x for x in r if x["kind"] == "gradients_kept")
    assert "zero_grad(set_to_none=True)" in g["detail"] + (g["code"] or "")


def test_reserved_much_larger_than_allocated_is_fragmentation_first() -> None:
    r = autopsy.choose_remedies(numbers(reserved=13 * GiB))  # 3 GiB free in the cache
    assert kinds(r)[0] == "fragmentation"
    assert "expandable_segments:True" in r[0]["detail"] + r[0]["code"]
    assert kinds(r)[1] == "activations"


def test_one_impossible_allocation_comes_first() -> None:
    r = autopsy.choose_remedies(numbers(requested=60 * GiB))
    assert kinds(r)[0] == "huge_allocation" and "broadcast" in r[0]["detail"]


def test_cpu_oom_is_host_memory_and_unknown_numbers_fall_back() -> None:
    assert kinds(autopsy.choose_remedies({"device": "cpu"})) == ["host_memory", "release_refs"]
    assert kinds(autopsy.choose_remedies({"device": "cuda:0"})) == ["reduce_batch", "release_refs"]


# --- the autopsy of a raised OutOfMemoryError -------------------------------------------------

GPU_CALLS = (
    "memory_stats",
    "memory_summary",
    "memory_allocated",
    "memory_reserved",
    "mem_get_info",
    "empty_cache",
    "synchronize",
    "device_count",
    "get_device_properties",
    "is_available",
    "current_device",
    "init",
    "_lazy_init",
)


def no_gpu_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    touched: list[str] = []
    for fn in GPU_CALLS:
        monkeypatch.setattr(torch.cuda, fn, lambda *a, _n=fn, **k: touched.append(_n))
    # As if torch were a CUDA build, so every CUDA path is taken as far as it would go.
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    return touched


def test_r23_autopsy_of_raised_cuda_oom_parses_chooses_and_touches_no_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    touched = no_gpu_calls(monkeypatch)
    model = nn.Linear(64, 64)

    def train_step() -> None:
        activations = torch.zeros(256, 1024)  # noqa: F841 - found in the failing frame
        raise torch.cuda.OutOfMemoryError(REAL_MESSAGE)

    exc = raised(train_step)
    facts = autopsy.oom_facts(exc)
    assert facts is not None and facts["requested_bytes"] == 2 * GiB
    body = autopsy.build(
        exc,
        facts,
        ns={"model": model},
        allocator=TorchAllocatorSource(),
        found=bd.discover({"model": model}),
        rss=None,
        summary=TorchAllocatorSource().summary,
    )
    assert touched == [] and not torch.cuda.is_initialized()
    assert body["device"] == "cuda:0" and body["requested_bytes"] == 2 * GiB
    assert body["allocator"] is None and "not initialised" in body["allocator_reason"]
    # The message's own numbers stand in for the allocator's.
    assert body["numbers"]["allocated"] == int(70.10 * GiB)
    assert body["numbers"]["reserved"] == int(70.10 * GiB) + int(6.50 * GiB)
    assert body["message_facts"]["free_bytes"] == int(1.23 * GiB)
    assert kinds(body["remedies"])[0] == "fragmentation"  # 6.5 GiB cached >= 2 GiB asked
    assert kinds(body["remedies"])[1] == "activations"  # no model on the GPU: all "other"
    assert body["tensors"] == []  # CPU tensors are not the failing device's
    assert "tried to allocate 2.00 GiB" in body["headline"] and body["summary"] is None


def test_cpu_oom_names_the_largest_tensors_from_frames_and_namespace() -> None:
    big = torch.zeros(1000, 1000)
    alias = big
    model = nn.Linear(10, 10)

    def forward(x: torch.Tensor) -> None:
        hidden = torch.zeros(500, 500, requires_grad=True) * 2  # an activation (grad_fn)
        batch = [torch.zeros(100, 100), "text"]  # noqa: F841
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
            f"memory: you tried to allocate 400000000000 bytes. {hidden.shape}"
        )

    exc = raised(lambda: forward(big))
    facts = autopsy.oom_facts(exc)
    assert facts is not None and facts["device"] == "cpu"
    ns = {"big": big, "alias": alias, "model": model, "Out": {3: big}}
    body = autopsy.build(
        exc, facts, ns=ns, allocator=allocator(), found=bd.discover(ns), rss=2 * GiB
    )
    rows = body["tensors"]
    assert [r["name"] for r in rows[:3]] == ["big", "hidden", "batch[0]"]
    assert set(rows[0]["also"]) == {"alias", "Out[3]", "x"}  # one storage, every name
    assert rows[0]["where"] == "namespace" and rows[0]["nbytes"] == 4_000_000
    assert rows[1]["where"] == "frame" and rows[1]["function"] == "forward"
    assert rows[1]["grad_fn"] is True and rows[1]["shape"] == [500, 500]
    assert {"model.weight", "model.bias"} <= {r["name"] for r in rows}
    assert kinds(body["remedies"])[0] == "host_memory"
    assert body["breakdown"]["device"] == "cpu" and body["breakdown"]["total"] == 2 * GiB
    assert body["allocator"] is None


def test_r23_autopsy_keeps_no_reference_to_frames_or_tensors() -> None:
    def fails() -> None:
        held = torch.zeros(10_000)
        refs.append(weakref.ref(held))
        raise RuntimeError(
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"
        )

    refs: list[weakref.ref] = []
    exc = raised(fails)
    body = autopsy.build(
        exc, autopsy.oom_facts(exc) or {}, ns={}, allocator=allocator(), found=bd.Found(), rss=None
    )
    assert body["tensors"][0]["name"] == "held"
    del exc
    gc.collect()
    assert refs[0]() is None


def test_allocator_numbers_at_failure_decide_over_the_message() -> None:
    model = nn.Linear(10, 10)
    exc = raised(lambda: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError(REAL_MESSAGE)))
    body = autopsy.build(
        exc,
        autopsy.oom_facts(exc) or {},
        ns={},
        allocator=allocator(allocated=8 * GiB, reserved=8 * GiB + 64 * MiB),
        found=bd.discover({"model": model}),
        rss=None,
        summary=lambda i: "|  PyTorch CUDA memory summary  |" * 2000,
    )
    assert body["allocator"]["allocated"] == 8 * GiB
    assert kinds(body["remedies"])[0] == "activations"  # 64 MiB cached < 2 GiB asked
    assert body["summary_truncated"] is True and len(body["summary"]) == autopsy.SUMMARY_CHARS


def test_not_an_oom_is_ignored() -> None:
    assert autopsy.oom_facts(ValueError("shapes cannot be multiplied")) is None
    facts = autopsy.oom_facts(torch.cuda.OutOfMemoryError(""))
    assert facts is not None and (facts["device"], facts["requested_bytes"]) == ("cuda", None)


# --- end to end in the extension: post_run_cell -> `oom` linked to `exception` ---------------


def test_oom_message_after_failed_cell_links_the_exception_and_replays() -> None:
    def cell() -> None:
        x = torch.zeros(300, 300)  # noqa: F841
        raise torch.cuda.OutOfMemoryError(REAL_MESSAGE)

    exc = raised(cell)
    with session({"model": nn.Linear(4, 4)}) as s:
        result = SimpleNamespace(
            error_in_exec=exc,
            error_before_exec=None,
            execution_count=5,
            info=SimpleNamespace(cell_id="c-oom", raw_cell="cell()", transformed_cell="cell()"),
        )
        s.shell.events.trigger("post_run_cell", result)
        (ex,) = s.comm.messages("exception")
        (oom,) = s.comm.messages("oom")
        assert oom["exception_id"] == ex["id"] and ex["diagnosis"]["links"] == ["memory"]
        assert oom["execution_count"] == 5 and oom["cell_id"] == "c-oom"
        assert oom["replay"] is False and oom["requested_bytes"] == 2 * GiB
        status = s.comm.messages("memory")[-1]
        assert status["last_oom"]["id"] == oom["id"]
        mon = memory_monitor()
        assert mon is not None
        replay = mon.snapshot_messages()[-1]
        assert replay["method"] == "oom" and replay["replay"] is True
        validate_kernel_message(replay)
        assert s.ext.errors == {}
    del exc
    assert "jupyterlab_torchdbg.kernel.memory" in sys.modules


def test_an_oom_without_a_device_index_is_reported_on_cuda_0() -> None:
    # torch.cuda.OutOfMemoryError with a text that names no GPU: the device is cuda:0, its
    # allocator's counters are those of index 0
    exc = raised(lambda: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("out of memory")))
    facts = autopsy.oom_facts(exc)
    assert facts is not None and facts["device"] == "cuda"
    body = autopsy.build(
        exc,
        facts,
        ns={},
        allocator=allocator(allocated=3 * GiB, reserved=4 * GiB),
        found=bd.Found(),
        rss=None,
    )
    assert body["device"] == "cuda:0" and body["breakdown"]["device"] == "cuda:0"
    assert body["allocator"]["allocated"] == 3 * GiB
    assert body["headline"].startswith("Out of memory on cuda:0.")
