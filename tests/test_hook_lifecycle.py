"""Loading and unloading while another thread trains never breaks its ``step()`` (R41),
and an unload leaves torch's hook dicts exactly as it found them once no step is in
flight (R01). See step_boundary.py for why the hooks are installed once per process and
changed only when no thread is inside ``Optimizer.step``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import torch
import torch.nn as nn
import torch.optim.optimizer as optim_mod
from grads_support import FakeCommManager, FakeShell
from kernel_client import KernelDriver

from jupyterlab_torchdbg.kernel import extension
from jupyterlab_torchdbg.kernel.step_boundary import HOOKS


def hook_dicts() -> tuple[list[object], list[object]]:
    return (
        list(optim_mod._global_optimizer_pre_hooks.values()),
        list(optim_mod._global_optimizer_post_hooks.values()),
    )


class ParkedStep:
    """A training thread that can be held inside ``optimizer.step()`` (in a pre-hook of
    its own, registered before the extension's), like a long step or a paused loop."""

    def __init__(self) -> None:
        self.model = nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.hold = threading.Event()
        self.inside = threading.Event()
        self.go_on = threading.Event()
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.steps = 0
        self.handle = optim_mod.register_optimizer_step_pre_hook(self._park)
        self.thread = threading.Thread(target=self._train, daemon=True)

    def _park(self, opt: object, args: object, kwargs: object) -> None:
        if opt is self.opt and self.hold.is_set():
            self.inside.set()
            self.go_on.wait(10)
            self.go_on.clear()
            self.inside.clear()

    def _train(self) -> None:
        x = torch.randn(2, 4)
        while not self.stop.is_set():
            try:
                self.opt.zero_grad()
                self.model(x).sum().backward()
                self.opt.step()
                self.steps += 1
            except Exception as e:  # what the user would see
                self.errors.append(repr(e))
            time.sleep(0.001)

    def park(self) -> None:
        self.hold.set()
        assert self.inside.wait(10), "the training thread never reached its step"

    def release(self) -> None:
        self.hold.clear()
        self.go_on.set()

    def close(self) -> None:
        self.stop.set()
        self.release()
        self.thread.join(10)
        self.handle.remove()


@pytest.fixture
def parked() -> Iterator[ParkedStep]:
    p = ParkedStep()
    p.thread.start()
    yield p
    p.close()


def test_r01_r41_load_and_unload_wait_for_the_step_in_flight(parked: ParkedStep) -> None:
    found = hook_dicts()
    assert not HOOKS.installed
    parked.park()  # the training thread is inside step(), iterating torch's hook dict
    ext = extension.load(FakeShell(), FakeCommManager())
    try:
        assert HOOKS.pending == "install" and hook_dicts() == found  # not touched yet
        parked.release()
        assert HOOKS.wait_idle(5) and HOOKS.installed
        assert len(hook_dicts()[0]) == len(found[0]) + 1
        steps = parked.steps
        deadline = time.monotonic() + 5
        while parked.steps < steps + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ext.grads is not None and len(ext.grads.tracks) == 1  # it monitors now
        parked.park()
    finally:
        extension.unload()
    # unloaded while a step is in flight: the hooks stay (calling nothing) until it ends
    assert HOOKS.pending == "remove" and HOOKS.target is None
    assert len(hook_dicts()[0]) == len(found[0]) + 1
    parked.release()
    assert HOOKS.wait_idle(5)
    assert hook_dicts() == found  # exactly as found
    assert parked.errors == []


def test_r01_a_load_takes_over_a_pending_removal(parked: ParkedStep) -> None:
    found = hook_dicts()
    extension.load(FakeShell(), FakeCommManager())
    assert HOOKS.wait_idle(5) and HOOKS.installed
    parked.park()
    extension.unload()
    assert HOOKS.pending == "remove"
    ext = extension.load(FakeShell(), FakeCommManager())  # reload before the step ended
    try:
        assert HOOKS.pending is None and HOOKS.target is ext.boundary
        parked.release()
        assert len(hook_dicts()[0]) == len(found[0]) + 1
    finally:
        extension.unload()
    assert HOOKS.wait_idle(5) and hook_dicts() == found
    assert parked.errors == []


TRAIN_IN_A_THREAD = """
import threading, time, torch, torch.nn as nn
import torch.optim.optimizer as _om
_found = (len(_om._global_optimizer_pre_hooks), len(_om._global_optimizer_post_hooks))
errors, steps, stop = [], [0], threading.Event()
def train():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16)
    while not stop.is_set():
        try:
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            steps[0] += 1
        except Exception as e:
            errors.append(repr(e))
t = threading.Thread(target=train, daemon=True)
t.start()
_deadline = time.monotonic() + 60  # the first step imports torch._dynamo: seconds
while steps[0] < 5 and time.monotonic() < _deadline:
    time.sleep(0.01)
assert steps[0] >= 5, "the training thread did not start"
"""

RELOADS = """
ip = get_ipython()
for i in range(150):
    ip.run_line_magic("reload_ext", "jupyterlab_torchdbg")
for i in range(100):
    ip.run_line_magic("unload_ext", "jupyterlab_torchdbg")
    time.sleep(0.001)
    ip.run_line_magic("load_ext", "jupyterlab_torchdbg")
"""


async def test_r41_reloads_while_another_thread_trains_never_break_its_step(
    kernel: KernelDriver,
) -> None:
    await kernel.run(TRAIN_IN_A_THREAD)
    await kernel.run("%load_ext jupyterlab_torchdbg")
    await kernel.run(RELOADS, timeout=300)
    # still monitoring the thread's optimizer after all that
    state = (
        "__import__('jupyterlab_torchdbg.kernel.step_boundary', fromlist=['x']).HOOKS.wait_idle(5),"
        " len(__import__('jupyterlab_torchdbg.kernel.extension', fromlist=['x'])"
        ".current().grads.tracks), steps[0], errors[:1]"
    )
    await kernel.run("time.sleep(0.5)")
    assert (await kernel.value(state)).split(" ", 2)[:2] == ["True", "1"], await kernel.value(
        state + ", __import__('jupyterlab_torchdbg.kernel.extension', fromlist=['x'])"
        ".current().errors"
    )
    await kernel.run("%unload_ext jupyterlab_torchdbg")
    await kernel.run("stop.set(); t.join(10)")
    out = (await kernel.value("len(errors), steps[0], errors[:3]")).split(" ", 2)
    assert out[0] == "0", out  # not one error in the user's step
    assert int(out[1]) > 250  # the thread really trained through the reloads
    # the thread has stopped: torch's dicts are as they were before the first load
    from_hooks = (
        "__import__('jupyterlab_torchdbg.kernel.step_boundary', fromlist=['x'])"
        ".HOOKS.wait_idle(5), "
        "(len(_om._global_optimizer_pre_hooks), len(_om._global_optimizer_post_hooks)) == _found"
    )
    assert await kernel.value(from_hooks) == "True True"
