"""Where activation memory goes (memory/activations): the bytes each module saves for
backward in one forward, measured with saved-tensor hooks and a module stack on real CPU
models (an MLP, a CNN, an LSTM, a keyword-called transformer-like model); the hooks all
gone after (R41), the user's results unchanged, nothing kept alive (R24); the action
idle (a re-run, R53) and while a cell trains; an OOM arms one."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch
import torch.nn as nn
from grads_support import session

from jupyterlab_torchdbg.kernel.memory.activations import Saved, SavedBytes
from jupyterlab_torchdbg.kernel.memory.activations.estimate import fits, memory_limit, report_fields
from jupyterlab_torchdbg.kernel.module_hooks import MODULE_HOOKS
from jupyterlab_torchdbg.testing import memory_monitor

F32 = 4


def no_hooks(model: nn.Module) -> bool:
    return all(
        not m._forward_hooks and not m._forward_pre_hooks and not m._forward_hooks_always_called
        for m in model.modules()
    )


def none_of_ours() -> bool:
    """No hook of the activations measurement is in torch's dicts (the gradient monitor's
    input keeper keeps its own on a root while the extension is loaded)."""
    assert MODULE_HOOKS.wait_idle(5)
    return not [h for h in MODULE_HOOKS.installed() if h.owner._site == "memory:activations"]


def measure(model: nn.Module, *args: Any, name: str = "model", **kwargs: Any) -> Saved:
    out: list[Saved] = []
    errors: list[str] = []
    sb = SavedBytes([(name, model)], out.append, errors.append)
    assert sb.ready
    y = model(*args, **kwargs)
    (y if isinstance(y, torch.Tensor) else y[0]).float().sum().backward()
    assert MODULE_HOOKS.wait_idle(5)
    assert no_hooks(model), "every hook is removed after the measured forward"
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert errors == [] and len(out) == 1
    return out[0]


def top(saved: Saved) -> str:
    return max(saved.modules.items(), key=lambda kv: kv[1][0])[0]


# --- what is measured ---------------------------------------------------------------------


def test_linear_relu_total_is_the_saved_input_and_relu_output() -> None:
    model = nn.Sequential(nn.Linear(100, 1000), nn.ReLU(), nn.Linear(1000, 10))
    s = measure(model, torch.randn(8, 100))
    # Linear 0 saves its input, ReLU its output (which Linear 2 saves too: one storage);
    # the weights Linear saves are parameters, not counted.
    assert s.total == 8 * 100 * F32 + 8 * 1000 * F32
    assert s.modules == {"model.0": [8 * 100 * F32, 1], "model.1": [8 * 1000 * F32, 1]}
    assert (s.batch, s.device, s.failed) == (8, "cpu", None)


def test_mlp_the_huge_layer_saves_most_and_per_sample_scales() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4096), nn.GELU(), nn.Linear(4096, 2)
    )
    r8 = report_fields(measure(model, torch.randn(8, 32)))
    r16 = report_fields(measure(model, torch.randn(16, 32)))
    assert r8["modules"][0]["name"] == "model.3"  # the GELU after the 4096-wide layer
    assert r16["total"] == 2 * r8["total"]
    assert r8["per_sample"] == r16["per_sample"] > 0
    assert r8["batch"] == 8 and r8["limit_source"] in ("cgroup", "host")
    assert r8["fits"] is not None and r8["fits"] >= 8
    assert "batch 8 saves" in r8["text"] and "upper bound" in r8["text"]


def test_cnn_the_wide_activation_saves_most() -> None:
    class CNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU())
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(x))

    model = CNN()
    s8 = measure(model, torch.randn(8, 3, 16, 16))
    assert top(s8) == "model.features.1"
    assert s8.modules["model.features.1"][0] == 8 * 64 * 16 * 16 * F32
    assert s8.modules["model.features.0"][0] == 8 * 3 * 16 * 16 * F32  # the conv's input
    s16 = measure(model, torch.randn(16, 3, 16, 16))
    assert abs(s16.total / 16 - s8.total / 8) <= 0.02 * s8.total / 8


def test_lstm_per_sample_scales() -> None:
    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(16, 128, batch_first=True)
            self.out = nn.Linear(128, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h, _ = self.lstm(x)
            return self.out(h)

    model = Tagger()
    s8 = measure(model, torch.randn(8, 20, 16))
    s16 = measure(model, torch.randn(16, 20, 16))
    assert top(s8) == "model.lstm" and s8.batch == 8
    # the LSTM saves its gates for every step: most of what the forward saves
    assert s8.modules["model.lstm"][0] > 0.5 * s8.total
    per8, per16 = s8.total / 8, s16.total / 16
    assert abs(per16 - per8) <= 0.05 * per8


def test_keyword_called_model_batch_from_kwargs() -> None:
    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(100, 32)
            self.block = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
            self.lm_head = nn.Linear(32, 100)

        def forward(
            self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None
        ) -> tuple[torch.Tensor]:
            h = self.embed(input_ids)
            pad = None if attention_mask is None else attention_mask == 0
            return (self.lm_head(self.block(h, src_key_padding_mask=pad)),)

    model = TinyLM()
    ids = torch.randint(0, 100, (6, 12))
    s = measure(model, input_ids=ids, attention_mask=torch.ones(6, 12, dtype=torch.long))
    assert s.batch == 6 and s.total > 0
    assert any(n.startswith("model.block") for n in s.modules)


# --- what is left behind ---------------------------------------------------------------------


def test_results_unchanged_and_nothing_kept_alive() -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(10, 50), nn.ReLU(), nn.Linear(50, 1), nn.Sigmoid())
    x = torch.randn(4, 10)
    y0 = model(x)
    y0.sum().backward()
    g0 = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    out: list[Saved] = []
    SavedBytes([("model", model)], out.append, lambda site: None)
    y1 = model(x)
    assert torch.equal(y0, y1)
    y1.sum().backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(g0, model.parameters(), strict=True))
    assert all(isinstance(v, int) for row in out[0].modules.values() for v in row)
    # A measured forward's output, which the sigmoid saves for backward, goes with its last
    # reference: the pack hook made no cycle (no collection needed), and nothing of ours
    # holds it.
    SavedBytes([("model", model)], out.append, lambda site: None)
    gc.disable()
    try:
        y2 = model(torch.randn(4, 10))
        w = weakref.ref(y2)
        assert len(out) == 3 or out[-1].total > 0
        del y2
        assert w() is None
    finally:
        gc.enable()
    assert out[-1].total > 0 and none_of_ours() and no_hooks(model)


def test_a_forward_that_raises_pops_the_hooks() -> None:
    class Boom(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) @ torch.zeros(5, 5)  # shape error after the Linear

    model = Boom()
    out: list[Saved] = []
    SavedBytes([("model", model)], out.append, lambda site: None)
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 4))
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert out[0].failed is not None
    assert MODULE_HOOKS.wait_idle(5) and no_hooks(model)


def test_users_saved_tensor_hooks_are_left_alone_and_eval_waits() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    out: list[Saved] = []
    SavedBytes([("model", model)], out.append, lambda site: None)
    with torch.no_grad():
        model(torch.randn(2, 4))  # evaluation: nothing saved, still armed
    assert out == []
    with torch.autograd.graph.save_on_cpu():
        y = model(torch.randn(2, 4))
        top_hooks = torch._C._autograd._top_saved_tensors_default_hooks(False)
        assert top_hooks is not None  # theirs, still in place
    y.sum().backward()
    assert out[0].failed is not None and "save_on_cpu" in out[0].failed
    assert MODULE_HOOKS.wait_idle(5) and no_hooks(model)


def test_fits_counts_the_measured_batch_as_already_in_use(tmp_path: Any) -> None:
    assert fits(64, 100, 4_000) == 64 + 40
    assert fits(None, 100, 4_000) is None and fits(8, 0, 10) is None
    (tmp_path / "memory.max").write_text("1000\n")
    (tmp_path / "memory.current").write_text("400\n")
    assert memory_limit(str(tmp_path)) == (600, "cgroup")
    (tmp_path / "memory.max").write_text("max\n")
    info = tmp_path / "meminfo"
    info.write_text("MemTotal: 100 kB\nMemAvailable:  50 kB\n")
    assert memory_limit(str(tmp_path), str(info)) == (50 * 1024, "host")


# --- the action, in-process ------------------------------------------------------------------


def train(model: nn.Module, opt: torch.optim.Optimizer, n: int, batch: int = 8) -> None:
    for _ in range(n):
        opt.zero_grad()
        model(torch.randn(batch, 6)).pow(2).mean().backward()
        opt.step()


def activations(comm: Any) -> list[dict[str, Any]]:
    return [d["activations"] for d in comm.messages("memory") if d.get("activations")]


def test_action_while_a_cell_trains_measures_the_next_step() -> None:
    model = nn.Sequential(nn.Linear(6, 256), nn.ReLU(), nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        train(model, opt, 2)
        ack = s.comm.action("measure_activations")
        assert ack["method"] == "ack" and ack["result"] == {"state": "armed"}
        assert activations(s.comm)[-1]["state"] == "armed"
        train(model, opt, 1, batch=32)
        done = activations(s.comm)[-1]
        assert done["state"] == "done" and done["batch"] == 32
        assert done["modules"][0]["name"] == "model.1"
        assert done["total"] == 32 * 6 * F32 + 32 * 256 * F32
        assert done["per_sample"] == 6 * F32 + 256 * F32
        s.end_cell()
        assert none_of_ours()


def test_action_idle_reruns_the_kept_forward_without_side_effects() -> None:
    model = nn.Sequential(nn.Linear(6, 64), nn.Dropout(0.5), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        train(model, opt, 3, batch=12)
        s.end_cell()
        state = {k: v.clone() for k, v in model.state_dict().items()}
        grads = [p.grad.clone() for p in model.parameters()]
        rng = torch.get_rng_state()
        ack = s.comm.action("measure_activations")
        assert ack["result"] == {"state": "done"}, activations(s.comm)[-1]
        rep = memory_monitor().activations.report
        assert rep is not None and rep["state"] == "done" and rep["batch"] == 12
        assert torch.equal(torch.get_rng_state(), rng)
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
        assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters(), strict=True))
        assert activations(s.comm)[-1]["state"] == "done"
        assert none_of_ours()


def test_action_idle_with_user_forward_stays_armed() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(6, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        train(model, opt, 2)
        s.end_cell()
        ack = s.comm.action("measure_activations")
        assert ack["result"] == {"state": "armed"}
        rep = activations(s.comm)[-1]
        assert "next training step" in rep["text"] and "Net.forward" in rep["text"]
        s.shell.events.trigger("pre_run_cell", None)
        train(model, opt, 1)
        assert activations(s.comm)[-1]["state"] == "done"
        s.end_cell()
    assert none_of_ours()


def test_no_model_fails_with_a_reason_and_unload_removes_the_armed_hooks() -> None:
    with session({}) as s:
        r = s.comm.action("measure_activations")
        assert r["result"] == {"state": "failed"}
        assert "no model" in activations(s.comm)[-1]["text"]
    model = nn.Linear(3, 3)
    with session({"model": model}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        assert s.comm.action("measure_activations")["result"] == {"state": "armed"}
        assert not none_of_ours()
    assert none_of_ours()


def test_a_cuda_oom_arms_a_measurement_and_its_remedy_says_so() -> None:
    from jupyterlab_torchdbg.kernel.memory import autopsy

    text = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.15 GiB of which 1.23 GiB is free. Of the allocated memory 70.10 GiB is "
        "allocated by PyTorch, and 6.50 GiB is reserved by PyTorch but unallocated."
    )
    model = nn.Linear(3, 3)
    with session({"model": model}) as s:
        exc = torch.cuda.OutOfMemoryError(text)
        facts = autopsy.oom_facts(exc)
        assert facts is not None
        msg = memory_monitor().capture_oom(exc, facts)
        details = " ".join(str(r["detail"]) for r in msg["remedies"])  # type: ignore[index, union-attr]
        assert "next attempt's forward is measured" in details
        rep = memory_monitor().activations.report
        assert rep is not None and rep["state"] == "armed" and "out-of-memory" in rep["text"]
        s.shell.events.trigger("pre_run_cell", None)
        model(torch.randn(5, 3)).sum().backward()
        assert activations(s.comm)[-1]["state"] == "done"


def test_idle_rerun_that_raises_reports_failed() -> None:
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with session({"model": model, "opt": opt}) as s:
        s.shell.events.trigger("pre_run_cell", None)
        train(model, opt, 1)
        s.end_cell()
        model[2] = nn.Linear(5, 1)  # the kept batch no longer fits the model
        reply = s.comm.action("measure_activations")
        assert reply["method"] == "ack" and reply["result"] == {"state": "failed"}
        assert "raised" in activations(s.comm)[-1]["text"]
        assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
        assert none_of_ours()
