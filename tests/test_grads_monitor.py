"""The step hook's lifecycle and safety (R01, R11, R14, R27, R28) and the block recorder."""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.optim.optimizer as optim_mod
from grads_support import session

from jupyterlab_torchdbg.kernel.grads import collector
from jupyterlab_torchdbg.kernel.grads.monitor import STATUS_INTERVAL_S
from jupyterlab_torchdbg.kernel.step_read import StepRead
from jupyterlab_torchdbg.kernel.stream import Stream, limits


def ours() -> list:
    """The process's global step pre-hook (it calls the loaded step boundary)."""
    return [
        h
        for h in optim_mod._global_optimizer_pre_hooks.values()
        if type(getattr(h, "__self__", None)).__name__ == "TorchHooks"
    ]


def train(model: nn.Module, opt: torch.optim.Optimizer, n: int, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        opt.zero_grad()
        x = torch.randn(8, 6, generator=g)
        model(x).pow(2).mean().backward()
        opt.step()


def test_r01_one_global_hook_removed_on_unload() -> None:
    before = len(ours())
    with session({}) as s:
        assert len(ours()) == before + 1
        assert {"set_stride", "set_thresholds", "clear_alerts"} <= set(s.ext.actions.names())
    assert len(ours()) == before


def test_r11_a_failing_collector_never_breaks_step(monkeypatch: pytest.MonkeyPatch) -> None:
    model = nn.Sequential(nn.Linear(6, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    reference = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)

    def boom(*a: object, **k: object) -> None:
        raise RuntimeError("tool bug")

    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        monkeypatch.setattr(collector, "grad_row", boom)
        train(model, opt, 3)
        assert s.ext.errors["grads:hook"] == 3
        monkeypatch.undo()
        train(model, opt, 2, seed=1)  # and it recovers
        s.end_cell()
        assert s.ext.errors["grads:hook"] == 3
        assert len(s.comm.series()["grad/opt/total"][0]) == 2
    train(reference, ref_opt, 3)
    train(reference, ref_opt, 2, seed=1)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b)  # training was not affected at all


def test_r11_failing_alarms_and_naming_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    class Weird(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)

    class Broken(nn.Module):  # a module whose named_parameters raises
        def named_parameters(self, *a: object, **k: object):  # type: ignore[override]
            raise RuntimeError("no")

    model = Weird()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "broken": Broken(), "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        from jupyterlab_torchdbg.kernel.grads.alarms import Detector

        monkeypatch.setattr(Detector, "evaluate", lambda *a, **k: 1 / 0)
        train(model, opt, 3)
        s.end_cell()
        assert s.ext.errors["grads:alarms"] >= 1
        assert "grads:hook" not in s.ext.errors
        assert [li["name"] for li in s.track()["layers"]] == ["model.fc"]


def test_r27_inplace_activations_train_unchanged() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(inplace=True), nn.Linear(16, 16))
    model.append(nn.LeakyReLU(inplace=True))
    model.append(nn.Linear(16, 2))
    reference = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=1e-2)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        train(model, opt, 10)
        s.end_cell()
        assert not s.ext.errors
        assert s.track()["sampled"] == 10
    train(reference, ref_opt, 10)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)


def test_r28_torch_compile_graph_breaks_unchanged() -> None:
    dynamo = pytest.importorskip("torch._dynamo")
    from torch._dynamo.utils import counters

    def breaks(loaded: bool) -> int:
        dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
        compiled = torch.compile(model, backend="eager")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        if loaded:
            with session({"model": compiled, "opt": opt}) as s:
                s.comm.action("set_stride", {"stride": 1})
                train(compiled, opt, 3)
                s.end_cell()
                assert not s.ext.errors
                assert [li["name"] for li in s.track()["layers"]] == ["model.0", "model.2"]
        else:
            train(compiled, opt, 3)
        return sum(counters["graph_break"].values())

    assert breaks(loaded=True) == breaks(loaded=False)


def test_r14_grads_actions_validate_their_arguments() -> None:
    with session({}) as s:
        bad = [
            ("set_stride", {}),
            ("set_stride", {"stride": 0}),
            ("set_stride", {"stride": -1}),
            ("set_stride", {"stride": 1.5}),
            ("set_stride", {"stride": math.nan}),
            ("set_stride", {"stride": float("1e309")}),
            ("set_stride", {"stride": "fast"}),
            ("set_stride", {"stride": True}),
            ("set_stride", {"stride": 1, "x": 2}),
            ("set_thresholds", {}),
            ("set_thresholds", {"explode_factor": 1}),
            ("set_thresholds", {"explode_factor": "10"}),
            ("set_thresholds", {"explode_abs": -1}),
            ("set_thresholds", {"vanish_steps": 2.5}),
            ("set_thresholds", {"vanish_floor": math.inf}),
            ("set_thresholds", {"eval": "1"}),
            ("clear_alerts", {"all": True}),
        ]
        for action, args in bad:
            reply = s.comm.action(action, args)
            assert reply["method"] == "error" and reply["code"] == "invalid_args", (action, args)
        ok = s.comm.action("set_thresholds", {"explode_abs": 1e4, "vanish_steps": 10})
        assert ok["result"]["thresholds"]["explode_abs"] == 1e4
        assert s.monitor.thresholds.vanish_steps == 10
        assert s.comm.action("set_thresholds", {"explode_abs": None})["method"] == "ack"
        assert s.monitor.thresholds.explode_abs is None
        for stride in ("auto", "off", 1, 100000):
            assert s.comm.action("set_stride", {"stride": stride})["method"] == "ack"


def test_set_stride_applies_to_running_tracks_and_off_stops_sampling() -> None:
    model = nn.Sequential(nn.Linear(6, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 3})
        train(model, opt, 9)
        assert s.track()["sampled"] == 3
        s.comm.action("set_stride", {"stride": "off"})
        train(model, opt, 9)
        assert s.track()["sampled"] == 3 and s.status()["state"] == "off"
        s.comm.action("set_stride", {"stride": "auto"})
        train(model, opt, 100)
        track = s.track()
        assert track["mode"] == "auto" and track["sampled"] >= 3 + 100 // track["stride"] - 1


def test_status_messages_are_rate_limited() -> None:
    model = nn.Sequential(nn.Linear(6, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        before = len(s.comm.messages("grads"))
        t0 = time.monotonic()
        train(model, opt, 300)
        elapsed = time.monotonic() - t0
        s.end_cell()
        # a status per change (new track, new plan) and per 2 s, never one per step
        sent = len(s.comm.messages("grads")) - before
        assert sent <= 4 + elapsed / STATUS_INTERVAL_S, (sent, elapsed)
        last = s.comm.messages("grads")[-1]
        assert last["tracks"][0]["step"] == 300
        assert last["tracks"][0]["overhead"] is not None


def test_grads_wait_for_torch_in_a_session_without_it() -> None:
    from grads_support import FakeCommManager, FakeShell

    from jupyterlab_torchdbg.kernel import extension
    from jupyterlab_torchdbg.testing import grad_monitor

    ext = extension.load(FakeShell(), FakeCommManager())
    try:
        mon = grad_monitor()
        assert mon is not None and mon.torch_attached  # torch is imported in this process
        ext._torch_attached = False
        mon.detach_torch()
        st = mon.status(full=True)
        assert st["state"] == "waiting" and "torch" in st["reason"]
    finally:
        extension.unload()


# --- the stream's block recorder --------------------------------------------------------


def test_block_rows_go_out_as_one_block_row_major() -> None:
    sent: list = []
    s = Stream(lambda h, b: sent.append((h, [bytes(x) for x in b])), interval_s=1e9)
    blk = s.block(["t", "a", "b"])
    seen: list = []
    blk.on_rows = lambda xs, m: seen.append((xs, m.tolist()))
    for i in range(4):
        blk.record(torch.tensor([i, 10.0 * i, 100.0 * i]), i + 1)
    s.flush()
    header, bufs = sent[0]
    assert header["blocks"] == [{"id": 1, "names": ["t", "a", "b"], "count": 4}]
    assert np.frombuffer(bufs[0], "<f8").tolist() == [1, 2, 3, 4]
    y = np.frombuffer(bufs[1], "<f4").reshape(4, 3)  # one row per x, as recorded
    assert y.T.tolist() == [[0, 1, 2, 3], [0, 10, 20, 30], [0, 100, 200, 300]]
    assert seen == [([1, 2, 3, 4], [[0, 0, 0], [1, 10, 100], [2, 20, 200], [3, 30, 300]])]
    assert s.points == 12 and s.messages == 1


def test_block_transform_runs_once_per_flush_on_the_host() -> None:
    calls: list = []

    def tf(m: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(m.shape))
        return m[:, :1] * 2

    sent: list = []
    s = Stream(lambda h, b: sent.append((h, [bytes(x) for x in b])), interval_s=1e9)
    blk = s.block(["double"])
    for i in range(50):
        blk.record(torch.tensor([float(i), -1.0]), i, tf)
    s.flush()
    assert calls == [(50, 2)]  # one stack, one transform for 50 steps
    assert np.frombuffer(sent[0][1][1], "<f4").tolist() == [2.0 * i for i in range(50)]


def test_block_history_is_decimated_and_in_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "HISTORY_CAPACITY", 64)
    s = Stream(lambda h, b: None, interval_s=1e9)
    blk = s.block(["u", "v"])
    for i in range(1000):
        blk.record([float(i), -float(i)], i)
        if i % 37 == 0:
            s.flush()
    s.flush()
    blocks, buffers, _ = s.snapshot()
    assert blocks == [{"id": 1, "names": ["u", "v"], "count": len(blk.history)}]
    n = blocks[0]["count"]
    assert n < 64
    x = np.frombuffer(bytes(buffers[0]), "<f8")
    y = np.frombuffer(bytes(buffers[1]), "<f4").reshape(n, 2).T
    assert x[0] == 0 and np.all(np.diff(x) > 0) and x[-1] > 900  # spans the whole run
    assert y[0].tolist() == x.tolist() and y[1].tolist() == (-x).tolist()


def test_block_pending_rows_are_bounded_and_drops_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "BLOCK_PENDING_ROWS", 10)
    sent: list = []
    s = Stream(lambda h, b: sent.append(h), interval_s=1e9)
    blk = s.block(["a"])
    for i in range(25):
        blk.record([float(i)], i)
    s.flush()
    assert sent[0]["blocks"] == [{"id": 1, "names": ["a"], "count": 10, "dropped": 15}]


def test_block_clear_and_bad_transform_is_contained() -> None:
    sent: list = []
    s = Stream(lambda h, b: sent.append(h), interval_s=1e9)
    good, bad = s.block(["g"]), s.block(["b1", "b2"])
    good.record([1.0], 0)
    bad.record([1.0], 0, lambda m: 1 / 0)
    s.flush()
    assert s.block_errors == 1
    assert sent[0]["blocks"] == [{"id": 1, "names": ["g"], "count": 1}]
    assert s.clear(["b2"]) == 2 and s.names() == ["g"]
    with pytest.raises(ValueError):
        s.block([])


def test_step_read_lets_control_clip_with_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """What clipping can reuse: this step's norms, handed to control at the same step,
    exactly what clip_grad_norm_ computes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Linear(8, 2))
    twin = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    seen: list[bool] = []

    def clip_with(optimizer: object, read: StepRead | None) -> None:
        if optimizer is not opt:
            return  # the twin's steps pass the boundary too
        got = read is not None and read.norms is not None and read.params is not None
        seen.append(got)
        if read is not None and read.norms is not None and read.params is not None:
            norms = read.norms
            torch.nn.utils.clip_grads_with_norm_(read.params, 0.5, torch.linalg.vector_norm(norms))

    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        assert s.ext.control is not None
        monkeypatch.setattr(s.ext.control, "at_step", clip_with)  # what the boundary calls
        train(model, opt, 3)
        s.comm.action("set_stride", {"stride": "off"})
        g = torch.Generator().manual_seed(0)
        for _ in range(3):
            twin_opt.zero_grad()
            twin(torch.randn(8, 6, generator=g)).pow(2).mean().backward()
            torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.5)
            twin_opt.step()
        assert seen == [True, True, True]
        for a, b in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(a, b)
        train(model, opt, 1)  # sampling is off: this step was not read
        assert seen[-1] is False


def test_grads_feature_imports_without_torch() -> None:
    """The extension imports its feature modules at load: grads must not pull torch in."""
    import subprocess
    import sys

    code = (
        "import sys, jupyterlab_torchdbg.kernel.grads as g, jupyterlab_torchdbg.bench as b; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _allocated_by(fn: object) -> int:
    """Bytes of every tensor the ops run inside ``fn()`` return (an upper bound on what
    they allocate), counted by a dispatch mode: deterministic, no timing, no profiler."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor) and t.device.type != "meta":
                    Count.total += t.untyped_storage().nbytes()
            return out

    with Count():
        fn()  # type: ignore[operator]
    return Count.total


def test_r25_the_hook_allocates_a_small_constant_not_a_copy_of_the_grads() -> None:
    """R25: no torch.cat of the grads, no retained grads: what one monitored step adds is
    a few bytes per tensor (the norms row), whatever the size of the model."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.Linear(1024, 1024))  # 8 MB of grads
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.randn(4, 1024)
    model(x).sum().backward()
    grads = sum(p.numel() * 4 for p in model.parameters())
    plain = _allocated_by(opt.step)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        opt.step()  # the first sample builds the plan and its layout (once)
        monitored = _allocated_by(opt.step)
        assert s.monitor.track_for(opt).sampled == 2  # type: ignore[union-attr]
        assert not s.ext.errors
    added = monitored - plain
    assert 0 < added <= 4096, (added, grads)
    assert added < grads / 1000
