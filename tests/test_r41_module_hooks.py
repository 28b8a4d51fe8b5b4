"""Every hook of the tool on a user's module is switched safely (R41, R01, R24, R29).

A thread trains (positional and keyword forward calls, a loss module called both ways)
while the main thread loads and unloads the real extension: the thread never sees an
exception, and after the last unload no hook of ours is on any module, nothing of ours
keeps the last batch alive and ``torch.jit.script`` works. See
jupyterlab_torchdbg/kernel/module_hooks.py for the rule.
"""

from __future__ import annotations

import gc
import threading
import time
import traceback
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.modules.module as module_mod
from grads_support import FakeCommManager, FakeShell

from jupyterlab_torchdbg.kernel import extension
from jupyterlab_torchdbg.kernel.module_hooks import MODULE_HOOKS, POST, PRE, HookSet
from jupyterlab_torchdbg.kernel.step_boundary import HOOKS

PACKAGE = "jupyterlab_torchdbg"
#: Every hook dict of a module, and torch's global ones.
MODULE_DICTS = (
    "_forward_pre_hooks",
    "_forward_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)
GLOBAL_DICTS = (
    "_global_forward_pre_hooks",
    "_global_forward_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)


def _ours(hook: object) -> bool:
    names = (getattr(hook, "__module__", None), type(hook).__module__)
    return any(isinstance(n, str) and n.startswith(PACKAGE) for n in names)


def our_hooks(*modules: nn.Module) -> list[str]:
    """Every trace of ours on these modules (and their submodules) and in torch's globals."""
    found = []
    for root in modules:
        for name, m in root.named_modules():
            for d in MODULE_DICTS[:4]:
                found += [f"{name}.{d}: {h!r}" for h in getattr(m, d).values() if _ours(h)]
            for d in MODULE_DICTS[4:]:
                ids = set(getattr(m, d))
                live = set(m._forward_pre_hooks) | set(m._forward_hooks)
                found += [f"{name}.{d}: stale id {i}" for i in ids - live]
            found += [f"{name}: attribute {k}" for k in vars(m) if "torchdbg" in k]
            found += [
                f"{name}: {k}" for k in ("__getstate__", "__prepare_scriptable__") if k in vars(m)
            ]
    for d in GLOBAL_DICTS:
        found += [f"global {d}: {h!r}" for h in getattr(module_mod, d).values() if _ours(h)]
    return found


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))


class Trainer:
    """A user's training thread: ``model(x)`` and ``model(x=x)``, ``criterion`` called
    positionally and with ``target=``; remembers its last batch by weak reference only."""

    def __init__(self) -> None:
        self.model = Net()
        self.criterion = nn.MSELoss()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.errors: list[str] = []
        self.steps = 0
        self.last: weakref.ref[torch.Tensor] | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._train, daemon=True)

    def _train(self) -> None:
        y = torch.zeros(4, 1)
        while not self.stop.is_set():
            try:
                x = torch.randn(4, 8)
                self.last = weakref.ref(x)
                out = self.model(x=x) if self.steps % 2 else self.model(x)
                loss = self.criterion(out, target=y) if self.steps % 3 else self.criterion(out, y)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                self.steps += 1
                del x, out, loss
            except Exception as e:  # what the user would see
                self.errors.append("".join(traceback.format_exception(e))[-2000:])

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 60
        while self.steps < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.steps >= 5, "the training thread did not start"

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def trainer() -> Iterator[Trainer]:
    t = Trainer()
    yield t
    t.close()
    extension.unload()


def test_r41_load_unload_300_times_while_a_thread_trains_leaves_no_hook(trainer: Trainer) -> None:
    ns: dict[str, Any] = {"model": trainer.model, "criterion": trainer.criterion}
    trainer.start()
    began, steps = time.monotonic(), trainer.steps
    for i in range(300):
        shell = FakeShell(ns)
        extension.load(shell, FakeCommManager())
        shell.events.trigger("pre_run_cell", None)  # hooks the namespace's models
        time.sleep(0.002)  # a step or two with the hooks on
        if i % 2:
            shell.run_cell_end()
        extension.unload(shell)
    assert time.monotonic() - began < 60
    assert HOOKS.wait_idle(10) and MODULE_HOOKS.wait_idle(10)
    # the thread still trains: the hooks left torch's dicts at a moment without a call
    assert our_hooks(trainer.model, trainer.criterion) == []
    assert trainer.steps > steps + 50  # it really trained through the switches
    trainer.close()
    assert trainer.errors == [], trainer.errors[0]
    assert our_hooks(trainer.model, trainer.criterion) == []
    gc.collect()
    assert trainer.last is not None and trainer.last() is None, "a batch is kept alive"
    scripted = torch.jit.script(trainer.model)
    x = torch.randn(2, 8)
    torch.testing.assert_close(scripted(x), trainer.model(x))


def test_r41_the_last_load_still_hooks_and_its_unload_removes(trainer: Trainer) -> None:
    """After a storm of reloads the extension left loaded keeps the batch; its unload
    removes everything (the set of one load never leaks into the next)."""
    ns: dict[str, Any] = {"model": trainer.model, "criterion": trainer.criterion}
    trainer.start()
    for _ in range(30):
        shell = FakeShell(ns)
        extension.load(shell, FakeCommManager())
        shell.events.trigger("pre_run_cell", None)
        extension.unload(shell)
    shell = FakeShell(ns)
    ext = extension.load(shell, FakeCommManager())
    shell.events.trigger("pre_run_cell", None)
    assert ext.grads is not None
    keeper = ext.grads.guard.keeper
    assert keeper is not None
    # hooked at the cell start, or (a forward was running then) at the next step's plan
    deadline = time.monotonic() + 10
    while keeper.call_of(trainer.model) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert MODULE_HOOKS.wait_idle(10) and trainer.model in keeper.hooked()
    assert keeper.call_of(trainer.model) is not None  # the batch is kept while loaded
    ours = our_hooks(trainer.model, trainer.criterion)
    assert len([h for h in ours if "_forward_pre_hooks:" in h]) == 1, ours  # one, not 31
    extension.unload(shell)
    assert MODULE_HOOKS.wait_idle(10) and our_hooks(trainer.model, trainer.criterion) == []
    trainer.close()
    assert trainer.errors == []


# --- the trampoline and the switching, one at a time -----------------------------------


def test_r41_a_hook_called_with_another_arity_or_after_removal_does_nothing() -> None:
    m = nn.Linear(2, 2)
    seen: list[object] = []
    errors: list[str] = []
    hooks = HookSet(errors.append, "test", None)
    pre, post = hooks.add(
        [
            (m, PRE, lambda mod, a, kw: seen.append(("pre", kw)), True),
            (m, POST, lambda mod, a, kw, out: seen.append(("post", kw)), True),
        ]
    )
    assert MODULE_HOOKS.wait_idle(5)
    m(input=torch.ones(2))
    assert [s for s, _ in seen] == ["pre", "post"]
    # what torch does when a switch lands between its snapshot and its with_kwargs test
    assert pre(m, (torch.ones(2),)) is None and post(m, (), torch.ones(2)) is None
    assert len(seen) == 2 and errors == []
    batch = torch.ones(2)
    ref = weakref.ref(batch)
    keeper = hooks.add([(m, PRE, lambda mod, a, kw, b=batch: None, True)])[0]
    del batch
    keeper.remove()
    keeper.remove()  # idempotent
    assert keeper(m, (), {}) is None
    gc.collect()
    assert ref() is None  # the removed hook's closure is dropped at once
    hooks.close()
    assert hooks.add([(m, PRE, lambda *a: None, False)]) == []  # closed: none added
    assert MODULE_HOOKS.wait_idle(5) and our_hooks(m) == []


def test_r41_a_failing_hook_is_counted_never_raised() -> None:
    m = nn.Linear(2, 2)
    errors: list[str] = []
    hooks = HookSet(errors.append, "test:site", None)

    def bad(mod: object, args: object) -> None:
        raise ValueError("ours")

    hooks.add([(m, PRE, bad, False)])
    assert MODULE_HOOKS.wait_idle(5)
    m(torch.ones(2))
    assert errors == ["test:site"]
    hooks.close()
    assert MODULE_HOOKS.wait_idle(5) and our_hooks(m) == []


class ParkedForward:
    """A thread held inside ``model(x)`` (in the forward of a submodule)."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.go_on = threading.Event()
        outer = self

        class Slow(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                outer.inside.set()
                outer.go_on.wait(10)
                return x

        self.model = nn.Sequential(nn.Linear(2, 2), Slow())
        self.thread = threading.Thread(target=lambda: self.model(torch.ones(2)), daemon=True)
        self.thread.start()
        assert self.inside.wait(10)

    def release(self) -> None:
        self.go_on.set()
        self.thread.join(10)


def test_r41_r01_switches_wait_for_the_module_call_in_flight() -> None:
    parked = ParkedForward()
    try:
        m = nn.Linear(2, 2)
        hooks = HookSet(lambda site: None, "test", None)
        (hook,) = hooks.add([(m, PRE, lambda *a: None, True)])
        assert hook.id is None and MODULE_HOOKS.pending == 1  # not while a call runs
        parked.release()
        assert MODULE_HOOKS.wait_idle(5) and hook.id is not None
        assert hook.id in m._forward_pre_hooks_with_kwargs and our_hooks(m) != []
        parked = ParkedForward()
        hooks.close()
        assert not hook.live and MODULE_HOOKS.pending == 1  # a no-op, still in the dict
        assert our_hooks(m) != []
        torch.jit.script(m)  # scripting takes ours out at once, pending or not
        assert our_hooks(m) == []
    finally:
        parked.release()
    assert MODULE_HOOKS.wait_idle(5) and MODULE_HOOKS.pending == 0
