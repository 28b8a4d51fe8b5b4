"""The tool's hooks never leak into what the user saves, copies or scripts (R29, R24).

Input keeping (grads/inputs.py) puts a forward pre-hook on each root model and a forward
hook on each loss module; loops without torch.optim get post-accumulate-grad hooks on the
parameters (backward_boundary.py). ``torch.save(model)``, ``copy.deepcopy`` and
``torch.jit.script`` of those modules must work as without the tool, and what they produce
must not mention this package (a saved model loads where it is not installed).
"""

from __future__ import annotations

import copy
import io
import pickle

import torch
from grads_support import session
from torch import nn


def _train(model: nn.Module, opt: torch.optim.Optimizer | None, crit: nn.Module, n: int) -> None:
    for _ in range(n):
        loss = crit(model(torch.randn(4, 6)), torch.randn(4, 2))
        if opt is not None:
            opt.zero_grad()
        else:
            model.zero_grad()
        loss.backward()
        if opt is not None:
            opt.step()
        else:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.01)


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))


def test_saving_copying_and_scripting_a_hooked_model_work_as_without_the_tool() -> None:
    torch.manual_seed(0)
    model, crit = _net(), nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt, "crit": crit}) as s:
        _train(model, opt, crit, 3)
        keeper = s.monitor.guard.keeper
        assert model in keeper.hooked() and crit in keeper.hooked()
        for obj in (model, crit):
            blob = pickle.dumps(obj)
            assert b"jupyterlab_torchdbg" not in blob and b"torchdbg" not in blob
            buf = io.BytesIO()
            torch.save(obj, buf)
            assert b"torchdbg" not in buf.getvalue()
            clone = copy.deepcopy(obj)
            assert not clone._forward_pre_hooks and not clone._forward_hooks
            assert not any("torchdbg" in k or k.startswith("__") for k in vars(clone))
        loaded = pickle.loads(pickle.dumps(model))
        x = torch.randn(3, 6)
        assert torch.equal(loaded(x), model(x))
        # the user's own hooks travel as they always did (only ours are left out)
        s.end_cell()
        scripted = torch.jit.script(model)
        assert torch.allclose(scripted(x), model(x))
        # scripting unhooked the model for good; training on goes on without errors
        assert model not in keeper.hooked()
        _train(model, opt, crit, 2)
        s.end_cell()
        assert model not in keeper.hooked()
        assert not s.ext.errors
    assert not model._forward_pre_hooks and "__getstate__" not in vars(model)
    assert not crit._forward_hooks and "__getstate__" not in vars(crit)


def test_a_user_hook_is_kept_in_the_pickle_and_ours_is_not() -> None:
    model, crit = _net(), nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt, "crit": crit}):
        _train(model, opt, crit, 2)
        model.register_forward_pre_hook(print)  # a picklable hook of the user's
        state = model.__getstate__()
        assert list(state["_forward_pre_hooks"].values()) == [print]
        assert len(model._forward_pre_hooks) == 2


def test_a_manual_loop_model_saves_and_copies_while_watched() -> None:
    torch.manual_seed(0)
    model, crit = _net(), nn.MSELoss()
    with session({"model": model, "crit": crit}) as s:
        s.ext.scan_models()  # what a cell start does
        _train(model, None, crit, 3)
        assert s.track("model")["boundary"] == "end_of_backward"
        blob = pickle.dumps(model)
        assert b"torchdbg" not in blob
        clone = copy.deepcopy(model)
        assert all(not p._post_accumulate_grad_hooks for p in clone.parameters())
        buf = io.BytesIO()
        torch.save(model, buf)
        assert b"torchdbg" not in buf.getvalue()
