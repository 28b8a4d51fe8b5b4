"""A run as TensorBoard event files (issue #24 part 4): the writer, the run's points, the
action's arguments and refusals, in-process; a real kernel's run read back from the
files in test_export_tensorboard_kernel.py."""

from __future__ import annotations

import importlib.util
import math
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from grads_support import session
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from jupyterlab_torchdbg import log
from jupyterlab_torchdbg.kernel import capabilities
from jupyterlab_torchdbg.kernel.action_registry import ActionError, ActionRegistry
from jupyterlab_torchdbg.kernel.export import attach, validate_export
from jupyterlab_torchdbg.kernel.export.tensorboard import (
    alarm_line,
    new_run_dir,
    notebook_stem,
    write_run,
)
from jupyterlab_torchdbg.kernel.stream import Stream
from jupyterlab_torchdbg.kernel.stream.run_points import run_points


def read_back(directory: Path) -> EventAccumulator:
    acc = EventAccumulator(str(directory))
    acc.Reload()
    return acc


def alarm_text(acc: EventAccumulator) -> str:
    (event,) = acc.Tensors("alarms/text_summary")
    return event.tensor_proto.string_val[0].decode()


def test_write_run_takes_the_record_shape(tmp_path: Path) -> None:
    """The run store's ``load_run`` shape: step series by step, memory by wall time."""
    t0 = 1_700_000_000.0
    series = [
        ("loss", [1.0, 2.0, 3.0], [0.5, 0.25, float("nan")]),
        ("grad/opt/total", [1.0, 2.0, 3.0], [3.0, 2.0, 1.0]),
        ("mem/cpu/rss", [t0, t0 + 0.5], [1e9, 2e9]),
    ]
    alerts = [
        {"step": 3, "layer": "0", "message": "gradient norm is NaN", "track": "opt"},
        {"step": 3, "layer": None, "message": "loss is\nNaN", "track": "opt"},
    ]
    assert write_run(tmp_path, series, alerts) == 8
    acc = read_back(tmp_path)
    assert sorted(acc.Tags()["scalars"]) == ["grad/opt/total", "loss", "mem/cpu/rss"]
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == [1, 2, 3]
    assert [e.value for e in loss[:2]] == [0.5, 0.25] and math.isnan(loss[2].value)
    assert [e.value for e in acc.Scalars("grad/opt/total")] == [3.0, 2.0, 1.0]
    mem = acc.Scalars("mem/cpu/rss")
    assert [(e.step, e.wall_time, e.value) for e in mem] == [(0, t0, 1e9), (1, t0 + 0.5, 2e9)]
    lines = alarm_text(acc).splitlines()
    assert lines[1:3] == ["step 3 · 0 · gradient norm is NaN", "step 3 · opt · loss is NaN"]


def test_alarm_line_is_one_plain_line() -> None:
    assert alarm_line({"step": 7, "layer": "fc.1", "message": "x\n  y"}) == "step 7 · fc.1 · x y"
    assert alarm_line({"step": 2, "message": "m"}) == "step 2 · - · m"


def test_run_dir_layout(tmp_path: Path) -> None:
    assert notebook_stem("/home/u/My Notebook (1).ipynb") == "My_Notebook_1"
    assert notebook_stem("train.ipynb") == "train"
    assert notebook_stem(None) == notebook_stem("") == notebook_stem("/..ipynb") == "kernel"
    now = time.mktime((2026, 3, 4, 5, 6, 7, 0, 0, -1))
    first = new_run_dir(tmp_path, "nb/train.ipynb", 3, now)
    again = new_run_dir(tmp_path, "nb/train.ipynb", 3, now)
    assert first.relative_to(tmp_path).as_posix() == "torchdbg-runs/train-run3-20260304-050607"
    assert again.name == "train-run3-20260304-050607-2"
    assert first.is_dir() and again.is_dir()


@pytest.mark.parametrize(
    ("args", "ok"),
    [
        ({"run": 1, "kernel": None}, True),
        ({"run": 2, "kernel": "0123456789abcdef"}, True),
        ({"run": 1}, False),
        ({"kernel": None}, False),
        ({"run": 0, "kernel": None}, False),
        ({"run": 1.5, "kernel": None}, False),
        ({"run": True, "kernel": None}, False),
        ({"run": 1, "kernel": "0123456789ABCDEF"}, False),
        ({"run": 1, "kernel": "../../etc"}, False),
        ({"run": 1, "kernel": 5}, False),
        ({"run": 1, "kernel": None, "path": "/tmp"}, False),
    ],
)
def test_validate_export(args: dict[str, Any], ok: bool) -> None:
    if ok:
        assert validate_export(args) == args
    else:
        with pytest.raises(ActionError):
            validate_export(args)


def test_run_points_picks_the_runs_series_and_its_memory_window() -> None:
    stream = Stream(lambda header, buffers: None)
    stream.record("mem/cpu/rss", 1.0, 99.0, per_run=False)  # before run 1
    stream.start_run(1)
    for step in (1, 2, 3):
        stream.record("loss", 1.0 / step, step)
        stream.block(["grad/opt/total", "grad/opt/fc"], per_run=True).record(
            [float(step), 2.0 * step], step
        )
    stream.record("mem/cpu/rss", 2.0, 100.0, per_run=False)
    stream.record("mem/cpu/rss", 3.0, 101.0, per_run=False)
    stream.flush(wait=True)
    stream.start_run(2)
    stream.record("loss", 9.0, 1)
    stream.record("mem/cpu/rss", 4.0, 102.0, per_run=False)
    stream.flush(wait=True)
    got = {name: (xs, ys) for name, xs, ys in run_points(stream, 1, 100.0, 101.5)}
    assert got["loss"] == ([1.0, 2.0, 3.0], pytest.approx([1.0, 0.5, 1 / 3]))
    assert got["grad/opt/total"] == ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert got["grad/opt/fc"] == ([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    assert got["mem/cpu/rss"] == ([100.0, 101.0], [2.0, 3.0])
    two = {name: xs for name, xs, _ in run_points(stream, 2, 101.5, 200.0)}
    assert two == {"loss": [1.0], "mem/cpu/rss": [102.0]}
    assert run_points(stream, 3, 200.0, 300.0) == []


def fake_host() -> SimpleNamespace:
    return SimpleNamespace(actions=ActionRegistry(lambda site: None))


def call(host: SimpleNamespace, args: dict[str, Any]) -> dict[str, Any]:
    data = {"method": "action", "request_id": str(time.monotonic()), "action": "export_tensorboard"}
    reply: dict[str, Any] = host.actions.handle({**data, "args": args})
    return reply


KERNEL = "0123456789abcdef"


def test_a_recorded_kernels_run_goes_through_the_injected_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "train.ipynb"))
    none = fake_host()
    attach(none, alerts=list)  # type: ignore[arg-type]
    reply = call(none, {"run": 1, "kernel": KERNEL})
    assert reply["code"] == "refused" and "no run record is available" in reply["message"]

    def load_run(kernel: str, run: int) -> tuple[dict[str, Any], list[Any], list[Any]]:
        if (kernel, run) != (KERNEL, 2):
            raise KeyError(run)
        alerts = [{"step": 2, "layer": "fc", "message": "NaN", "run": 2}]
        return {"id": 2}, [("loss", [1.0, 2.0], [0.5, 0.4])], alerts

    host = fake_host()
    attach(host, alerts=list, load_record_run=load_run)  # type: ignore[arg-type]
    reply = call(host, {"run": 2, "kernel": KERNEL})
    assert reply["method"] == "ack", reply
    path = reply["result"]["path"]
    assert reply["result"]["scalars"] == 2
    assert path.startswith("torchdbg-runs/train-run2-") and not Path(path).is_absolute()
    acc = read_back(tmp_path / path)
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 0.5), (2, pytest.approx(0.4))]
    assert "step 2 · fc · NaN" in alarm_text(acc)
    reply = call(host, {"run": 3, "kernel": KERNEL})
    assert reply["code"] == "refused" and "not recorded" in reply["message"]


def test_without_tensorboard_the_capability_says_why_and_the_action_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert capabilities.tensorboard_info()["available"] is True
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "tensorboard" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    info = capabilities.tensorboard_info()
    assert info == {
        "available": False,
        "version": None,
        "reason": "install tensorboard in the kernel's environment to export event files",
    }
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        hello = s.comm.messages("hello")[-1]
        assert hello["capabilities"]["tensorboard"] == info
        for _ in range(3):
            opt.zero_grad()
            loss = model(torch.randn(4, 2)).pow(2).mean()
            loss.backward()
            opt.step()
            log(loss=loss.item())
        s.end_cell()
        reply = s.comm.action("export_tensorboard", {"run": 1, "kernel": None})
        assert reply["code"] == "refused" and "pip install tensorboard" in reply["message"]
    assert not (tmp_path / "torchdbg-runs").exists()


def test_this_kernels_run_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps, gradient norms and the run's own alerts; unknown runs refused."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    logged = []
    with session({"model": model, "opt": opt}) as s:
        for _ in range(5):
            opt.zero_grad()
            loss = model(torch.randn(8, 3)).pow(2).mean()
            loss.backward()
            opt.step()
            logged.append(loss.item())
            log(loss=loss.item())
        s.end_cell()
        s.ext.grads.alerts.history.append(  # type: ignore[union-attr]
            SimpleNamespace(to_json=lambda: {"run": 1, "step": 4, "layer": "0", "message": "m"})
        )
        reply = s.comm.action("export_tensorboard", {"run": 1, "kernel": None})
        assert reply["method"] == "ack", reply
        path = reply["result"]["path"]
        assert path.startswith("torchdbg-runs/kernel-run1-")
        acc = read_back(tmp_path / path)
        loss_events = acc.Scalars("loss")
        assert [e.step for e in loss_events] == [1, 2, 3, 4, 5]
        assert [e.value for e in loss_events] == pytest.approx(logged, rel=1e-6)
        tags = acc.Tags()["scalars"]
        assert "grad/opt/total" in tags and any(t.startswith("param/") for t in tags)
        assert reply["result"]["scalars"] == sum(len(acc.Scalars(t)) for t in tags)
        assert "step 4 · 0 · m" in alarm_text(acc)
        for run in (2, 99):
            reply = s.comm.action("export_tensorboard", {"run": run, "kernel": None})
            assert reply["code"] == "refused" and "unknown" in reply["message"], reply
