"""The memory monitor in-process (the real extension against a fake shell and comm):
lifecycle (R01), CUDA never initialised (R02), NVML absent / NotSupported through the
recorded fake source (R03, R37), the poller thread (R36), errors contained (R11), the
`memory` message and `mem/` series, actions' validation and replies (R13, R14, R22)."""

from __future__ import annotations

import copy
import sys
import threading
import time
import weakref
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.optim.optimizer as optim_mod
from grads_support import Session, session

from jupyterlab_torchdbg.kernel import extension
from jupyterlab_torchdbg.kernel.action_args import no_args
from jupyterlab_torchdbg.kernel.memory import monitor as monitor_mod
from jupyterlab_torchdbg.kernel.memory.monitor import MemoryMonitor
from jupyterlab_torchdbg.kernel.memory.sources import DeviceReading, Reading, RecordedSource
from jupyterlab_torchdbg.testing import memory_monitor

GiB = 2**30


def mon() -> MemoryMonitor:
    m = memory_monitor()
    assert m is not None
    return m


def quiet(m: MemoryMonitor) -> None:
    """Stop the poller so a test drives ``poll_once`` itself (deterministic)."""
    assert m.poller is not None
    m.poller.stop()


def ours() -> list[Any]:
    return [
        h
        for h in optim_mod._global_optimizer_post_hooks.values()
        if "jupyterlab_torchdbg" in getattr(h, "__module__", "")
    ]


def train(model: nn.Module, opt: torch.optim.Optimizer, n: int) -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(n):
        opt.zero_grad()
        model(torch.randn(8, 6, generator=g)).pow(2).mean().backward()
        opt.step()


def alloc_reading(allocated: int = 3 * GiB, reserved: int = 4 * GiB) -> Reading:
    values = {
        "allocated": allocated,
        "reserved": reserved,
        "peak": 5 * GiB,
        "active": allocated,
        "inactive_split": 10,
        "alloc_retries": 0,
        "ooms": 0,
    }
    info = {"name": "Fake H100", "uuid": "GPU-aaaa1111-0000-0000-0000-000000000000"}
    return Reading(True, None, [DeviceReading(0, values, {}, info)])


def nvml_reading(**unavailable: str) -> Reading:
    values: dict[str, Any] = {
        "used": 6 * GiB,
        "total": 80 * GiB,
        "util_gpu": 97,
        "util_memory": 40,
        "temperature_c": 61,
        "power_w": 512.3,
        "power_limit_w": 700.0,
        "process_used": 5 * GiB,
    }
    for k in unavailable:
        values[k] = None
    info = {"name": "Fake H100", "uuid": "GPU-aaaa1111-0000-0000-0000-000000000000", "mig": False}
    return Reading(True, None, [DeviceReading(0, values, dict(unavailable), info)])


# --- lifecycle ---------------------------------------------------------------------------------


def test_r01_hook_thread_events_and_actions_removed_on_unload() -> None:
    before = len(ours())
    with session({}) as s:
        m = mon()
        assert len(ours()) == before + 1
        assert m.poller is not None and m.poller.alive
        assert {"empty_cache", "release_refs", "record_memory", "save_checkpoint"} <= set(
            s.ext.actions.names()
        )
        # the extension's cell events call the monitor's (in the order extension.py gives)
        assert s.ext._post_run_cell in s.shell.events.callbacks["post_run_cell"]
        assert s.ext.memory is m
        poller = m.poller
    assert len(ours()) == before
    assert not poller.alive
    assert s.ext._post_run_cell not in s.shell.events.callbacks["post_run_cell"]
    assert s.ext._pre_run_cell not in s.shell.events.callbacks["pre_run_cell"]
    assert extension.current() is None
    assert not [t for t in threading.enumerate() if t.name == "torchdbg-memory"]


# --- R02: CUDA never initialised ------------------------------------------------------------------


def test_r02_load_train_sample_poll_never_initialise_cuda(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    touched: list[str] = []
    for fn in (
        "_lazy_init",
        "init",
        "is_available",
        "device_count",
        "get_device_properties",
        "mem_get_info",
        "memory_stats",
        "memory_summary",
        "empty_cache",
        "synchronize",
        "current_device",
    ):
        monkeypatch.setattr(torch.cuda, fn, lambda *a, _n=fn, **k: touched.append(_n))
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # take every CUDA-build path
    monkeypatch.chdir(tmp_path)
    queued = list(torch.cuda._queued_calls)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters())
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        train(model, opt, 20)
        mon().poll_once()
        s.end_cell()
        status = mon().status()
        assert status["state"] == "cuda_idle" and status["breakdown"] is not None
        assert s.comm.action("empty_cache")["code"] == "refused"
        armed = s.comm.action("record_memory", {"op": "start"})
        assert armed["result"]["state"] == "armed"  # queued for CUDA's own initialisation
        assert len(torch.cuda._queued_calls) == len(queued) + 1
        s.comm.action("release_refs")
        s.comm.action("save_checkpoint", {"filename": "c.pt"})
        assert s.comm.action("snapshot")["method"] == "ack"
    assert list(torch.cuda._queued_calls) == queued  # the armed start was removed on unload
    assert touched == []
    assert not torch.cuda.is_initialized()


# --- the `memory` message with the recorded fake source (R03, R37) --------------------------------


def fake_session(s: Session, allocator: Reading | None, nvml: Reading) -> MemoryMonitor:
    m = mon()
    quiet(m)
    if allocator is not None:
        m.allocator = RecordedSource("allocator", [allocator])
    m.nvml = RecordedSource("nvml", [nvml])
    return m


def test_r37_not_supported_fields_are_na_with_reasons_in_the_card() -> None:
    with session({}) as s:
        m = fake_session(
            s,
            alloc_reading(),
            nvml_reading(power_w="not supported by this GPU or driver", util_gpu="no permission"),
        )
        m.sample_allocator()
        m.poll_once()
        m.publish(immediate=True)
        msg = s.comm.messages("memory")[-1]  # validated against the schema on send
        assert msg["state"] == "active"
        (card,) = msg["devices"]
        assert card["device"] == "cuda:0" and card["name"] == "Fake H100"
        assert card["matched_by"] == "uuid" and card["nvml_index"] == 0
        assert card["allocator"]["allocated"] == 3 * GiB
        assert card["nvml"]["power_w"] is None and card["nvml"]["util_gpu"] is None
        assert card["unavailable"] == {
            "power_w": "not supported by this GPU or driver",
            "util_gpu": "no permission",
        }
        assert card["nvml"]["temperature_c"] == 61 and card["nvml"]["process_used"] == 5 * GiB
        assert card["series"]["allocated"] == "mem/cuda:0/allocated"


def test_r03_nvml_absent_still_shows_the_allocator_and_the_reason() -> None:
    with session({}) as s:
        m = fake_session(s, alloc_reading(), Reading(False, "NVML unavailable: LibraryNotFound"))
        m.sample_allocator()
        m.poll_once()
        status = m.status()
        assert status["nvml"] == {
            "available": False,
            "reason": "NVML unavailable: LibraryNotFound",
        }
        (card,) = status["devices"]
        assert card["nvml"] is None and "LibraryNotFound" in card["nvml_reason"]
        assert card["allocator"]["reserved"] == 4 * GiB
        assert card["name"] == "Fake H100"  # from torch's properties


def test_cpu_only_state_says_no_cuda_and_keeps_the_cpu_breakdown() -> None:
    model = nn.Linear(6, 1)
    with session({"model": model}) as s:
        s.end_cell()
        status = s.comm.messages("memory")[-1]
        assert status["state"] == "no_cuda" and "CPU-only" in status["reason"]
        assert status["devices"] == []
        (row,) = status["breakdown"]["devices"]
        assert row["device"] == "cpu" and row["parameters"] == 7 * 4
        assert row["total_source"] == "rss" and status["host"]["rss"] > 0


def test_cuda_idle_cards_come_from_nvml_before_cuda_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    with session({}) as s:
        m = fake_session(s, None, nvml_reading())
        m.sample_allocator()
        m.poll_once()
        status = m.status()
        assert status["state"] == "cuda_idle" and "not initialised" in status["reason"]
        (card,) = status["devices"]
        assert card["matched_by"] == "visible_devices" and card["allocator"] is None
        assert card["nvml"]["used"] == 6 * GiB and "not initialised" in card["allocator_reason"]


# --- streaming --------------------------------------------------------------------------------


def test_numbers_stream_as_mem_series_while_a_cell_runs() -> None:
    model = nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        m = fake_session(s, alloc_reading(), nvml_reading())
        t0 = time.time()
        s.shell.events.trigger("pre_run_cell", None)
        train(model, opt, 3)
        m.poll_once()
        s.end_cell()
        series = s.comm.series()
        for name in (
            "mem/cuda:0/allocated",
            "mem/cuda:0/reserved",
            "mem/cuda:0/peak",
            "mem/cuda:0/inactive_split",
            "mem/cuda:0/nvml_used",
            "mem/cpu/rss",
        ):
            assert name in series, name
        x, y = series["mem/cuda:0/allocated"]
        assert y[-1] == 3 * GiB and t0 - 1 <= x[0] <= x[-1] <= time.time() + 1
        assert series["mem/cuda:0/nvml_used"][1][-1] == 6 * GiB
        # Idle: the poller records nothing (the history is not filled by an idle kernel).
        n = len(series["mem/cpu/rss"][0])
        m.poll_once()
        s.ext.stream.flush()
        assert len(s.comm.series()["mem/cpu/rss"][0]) == n


def test_status_is_rate_limited_and_sent_only_on_change() -> None:
    now = [100.0]
    with session({}) as s:
        m = fake_session(s, alloc_reading(), nvml_reading())
        m._clock = lambda: now[0]
        m.in_cell = True
        m.poll_once()
        base = len(s.comm.messages("memory"))
        m._sent_key = None
        m.publish(immediate=True)
        for _ in range(10):  # a burst within 0.5 s: held back
            now[0] += 0.04
            m.poll_once()
        assert len(s.comm.messages("memory")) == base + 1
        now[0] += 0.5
        m.poll_once()  # nothing changed: not sent
        assert len(s.comm.messages("memory")) == base + 1
        m.nvml = RecordedSource("nvml", [nvml_reading(power_w="not supported")])
        m.poll_once()
        assert len(s.comm.messages("memory")) == base + 2


# --- R11 and R36 --------------------------------------------------------------------------------


class Broken:
    kind = "allocator"

    def read(self) -> Reading:
        raise RuntimeError("tool bug")


def test_r11_a_failing_source_never_breaks_the_step() -> None:
    model = nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        mon().allocator = Broken()  # type: ignore[assignment]
        mon()._next_sample = 0.0
        train(model, opt, 2)
        s.end_cell()
        assert s.ext.errors["memory:step"] >= 1 and s.ext.errors["memory:post_run_cell"] == 1
    train(ref, ref_opt, 2)
    assert torch.equal(model.weight, ref.weight)


def test_r36_poller_thread_never_touches_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []

    def spy(name: str, real: Any) -> Any:
        def f(*a: Any, **k: Any) -> Any:
            threads.append(threading.current_thread().name)
            return real(*a, **k)

        return f

    for fn in ("is_initialized", "device_count", "memory_stats", "_lazy_init"):
        monkeypatch.setattr(torch.cuda, fn, spy(fn, getattr(torch.cuda, fn)))
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # so the main thread asks torch
    monkeypatch.setattr(monitor_mod, "POLL_INTERVAL_S", 0.02)
    monkeypatch.setattr(monitor_mod, "STATUS_BUSY_S", 0.02)
    import jupyterlab_torchdbg.kernel.memory as memory_pkg

    monkeypatch.setattr(memory_pkg, "POLL_INTERVAL_S", 0.02)
    with session({}) as s:
        m = mon()
        m.in_cell = True
        s.shell.events.trigger("pre_run_cell", None)  # the main thread may look
        count = len(s.comm.messages("memory"))
        time.sleep(0.3)  # ~15 polls, each recording and publishing
        m.nvml = RecordedSource("nvml", [nvml_reading()])
        time.sleep(0.3)
        assert len(s.comm.messages("memory")) > count  # the poller did publish
    assert "torchdbg-memory" not in threads
    assert threads  # the main thread did look (the spy works)


# --- actions ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, fragment",
    [
        ({}, "op must be"),
        ({"op": "begin"}, "op must be"),
        ({"op": "start", "max_entries": True}, "whole number"),
        ({"op": "start", "max_entries": 1.5}, "whole number"),
        ({"op": "start", "max_entries": 10**12}, "between"),
        ({"op": "start", "max_entries": 10}, "between"),
        ({"op": "stop", "max_entries": 5000}, "only for op 'start'"),
        ({"op": "start", "stacks": "all"}, "unknown argument"),
    ],
)
def test_r14_record_memory_arguments_validated(args: dict[str, Any], fragment: str) -> None:
    with session({}) as s:
        reply = s.comm.action("record_memory", args)
        assert reply["method"] == "error" and reply["code"] == "invalid_args"
        assert fragment in reply["message"]


@pytest.mark.parametrize(
    "args",
    [
        {"filename": "../evil.pt"},
        {"filename": "/etc/evil.pt"},
        {"filename": "a/b.pt"},
        {"filename": "a\\b.pt"},
        {"filename": "model..pt"},
        {"filename": "notes.txt"},
        {"filename": ".pt"},
        {"filename": "x" * 200 + ".pt"},
        {"filename": 5},
        {"filename": "ok.pt", "overwrite": "yes"},
        {"filename": "ok.pt", "path": "/tmp"},
    ],
)
def test_r14_save_checkpoint_rejects_paths_and_bad_names(
    args: dict[str, Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with session({"model": nn.Linear(2, 2)}) as s:
        reply = s.comm.action("save_checkpoint", args)
        assert reply["method"] == "error" and reply["code"] == "invalid_args"
    assert list(tmp_path.iterdir()) == []


def test_r13_save_checkpoint_writes_once_and_never_overwrites_silently(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    model = nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    train(nn.Sequential(nn.Linear(6, 3), model), opt, 1)
    with session({"model": model, "opt": opt}) as s:
        data = {
            "method": "action",
            "request_id": "save-1",
            "action": "save_checkpoint",
            "args": {"filename": "ckpt.pt"},
        }
        s.comm._on_msg({"content": {"data": data}})
        s.comm._on_msg({"content": {"data": data}})  # a double click
        acks = [d for d, _ in s.comm.sent if d.get("request_id") == "save-1"]
        assert [a["method"] for a in acks] == ["ack", "ack"] and acks[1]["duplicate"] is True
        assert acks[0]["result"]["models"] == ["model"]
        assert acks[0]["result"]["optimizers"] == ["opt"]
        assert acks[0]["result"]["overwritten"] is False
        again = s.comm.action("save_checkpoint", {"filename": "ckpt.pt"})
        assert again["code"] == "refused" and "already exists" in again["message"]
        replaced = s.comm.action("save_checkpoint", {"filename": "ckpt.pt", "overwrite": True})
        assert replaced["result"]["overwritten"] is True
        default = s.comm.action("save_checkpoint")
        assert default["result"]["file"].startswith("checkpoint_")
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert torch.equal(saved["models"]["model"]["weight"], model.weight)
    assert saved["optimizers"]["opt"]["state"][0]["exp_avg"].shape == (2, 3)
    assert sorted(p.name for p in tmp_path.iterdir())[0] == "checkpoint_" + default["result"][
        "file"
    ].removeprefix("checkpoint_")
    assert (tmp_path / "ckpt.pt").stat().st_mode & 0o077 == 0  # not world-readable (S6)


def test_save_checkpoint_refused_with_nothing_to_save(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    with session({"x": torch.zeros(3)}) as s:
        reply = s.comm.action("save_checkpoint", {"filename": "a.pt"})
        assert reply["code"] == "refused" and "nothing to save" in reply["message"]


def test_r12_save_while_a_cell_trains_runs_at_the_next_step(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    model = nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}):
        m = mon()
        m.in_cell = True
        ran_on: list[str] = []
        reply: list[dict[str, Any]] = []

        def save() -> dict[str, Any]:
            ran_on.append(threading.current_thread().name)
            return {"ok": True}

        t = threading.Thread(target=lambda: reply.append(m.at_safe_point(save)), name="subshell")
        t.start()
        deadline = time.monotonic() + 5
        while not m.jobs.waiting and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ran_on == []  # not applied mid-step on the comm thread
        train(model, opt, 1)  # the step boundary runs it
        t.join(5)
        assert ran_on == [threading.main_thread().name] and reply == [{"ok": True}]
        m.in_cell = False


def test_r22_after_a_device_side_assert_empty_cache_says_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    touched: list[str] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: touched.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda *a: touched.append("memory_stats"))
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # CUDA in use...

    class Result:
        execution_count = 3
        info = None
        error_before_exec = None
        error_in_exec = RuntimeError(
            "CUDA error: device-side assert triggered\nCUDA kernel errors might be "
            "asynchronously reported at some other API call"
        )

    with session({}) as s:
        quiet(mon())
        s.shell.events.trigger("post_run_cell", Result())  # ...then a sticky error
        reply = s.comm.action("empty_cache")
        assert reply["code"] == "refused"
        assert "CUDA context is corrupted — restart the kernel" in reply["message"]
        assert s.comm.messages("memory")[-1]["state"] == "corrupted"
        assert s.comm.action("record_memory", {"op": "start"})["code"] == "refused"
        mon().after_step(None)
    assert touched == []


def test_release_refs_in_process_frees_traceback_frames() -> None:
    def fails() -> None:
        big = torch.zeros(1_000_000)
        refs.append(weakref.ref(big))
        raise RuntimeError("boom")

    refs: list[weakref.ref] = []
    try:
        fails()
    except RuntimeError:
        sys.last_type, sys.last_value, sys.last_traceback = sys.exc_info()
    with session({}) as s:
        assert refs[0]() is not None
        reply = s.comm.action("release_refs")
        assert reply["method"] == "ack", reply
        assert "sys.last_traceback" in reply["result"]["cleared"]
        assert "%debug" in reply["result"]["note"]
    assert refs[0]() is None and not hasattr(sys, "last_value")


def test_r14_schema_and_validators_agree_on_memory_actions() -> None:
    from jsonschema import Draft202012Validator

    from jupyterlab_torchdbg.kernel.action_registry import ActionError
    from jupyterlab_torchdbg.kernel.memory.action_args import validate_checkpoint, validate_record
    from jupyterlab_torchdbg.protocol import load_schema

    schema = load_schema()
    panel = Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/PanelMessage"})
    validators = {
        "record_memory": validate_record,
        "save_checkpoint": validate_checkpoint,
        "empty_cache": no_args,
        "release_refs": no_args,
    }
    cases = [
        ("empty_cache", {}, True),
        ("empty_cache", {"device": 0}, False),
        ("release_refs", {}, True),
        ("record_memory", {"op": "start"}, True),
        ("record_memory", {"op": "start", "max_entries": 5000}, True),
        ("record_memory", {"op": "start", "max_entries": 999}, False),
        ("record_memory", {"op": "stop"}, True),
        ("record_memory", {"op": "stop", "max_entries": 5000}, False),
        ("record_memory", {"op": "pause"}, False),
        ("save_checkpoint", {}, True),
        ("save_checkpoint", {"filename": "run 1.pth", "overwrite": True}, True),
        ("save_checkpoint", {"filename": "../up.pt"}, False),
        ("save_checkpoint", {"filename": "a..b.pt"}, False),
        ("save_checkpoint", {"filename": "dir/x.pt"}, False),
        ("save_checkpoint", {"filename": "x.pkl"}, False),
    ]
    for name, args, ok in cases:
        msg = {"method": "action", "request_id": "r", "action": name, "args": args}
        assert panel.is_valid(msg) is ok, (name, args)
        try:
            validators[name](dict(args))
            accepted = True
        except ActionError:
            accepted = False
        assert accepted is ok, (name, args)
