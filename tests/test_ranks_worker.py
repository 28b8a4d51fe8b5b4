"""Worker processes (issue #15): real ranks on CPU with gloo, an ``Endpoint`` in the test
process standing in for the kernel (a recording callback), each launcher the notebook
uses: ``mp.spawn`` (the kernel side installed here, as ``%load_ext`` does), a fork
launcher from a process where the kernel side was installed, and a ``torchrun``
subprocess that inherited the environment.

One spawn job serves several checks in turn (each spawn costs a torch import per process
on a busy machine): hello and rows from both ranks with equal norms at the same steps,
prepare/cancel (nothing applied), prepare/commit of a clip (applied at the same step on
both ranks; the weights each rank saves are bit-identical), pause held at the agreed
step until resume, a sleeping rank's heartbeat carrying its stack while the other waits
in the collective, and an exception from a rank with its rank. Waits are on conditions
with generous timeouts, never on sleeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
import torch.multiprocessing as mp

from jupyterlab_torchdbg.kernel.step_boundary import HOOKS
from jupyterlab_torchdbg.ranks.kernel import worker_env
from jupyterlab_torchdbg.ranks.kernel.endpoint import Endpoint
from jupyterlab_torchdbg.ranks.wire import transport as wire
from jupyterlab_torchdbg.ranks.wire.packed import layout_of

#: A wait for something the ranks do (a spawn is a torch import per process).
JOB_TIMEOUT_S = 180.0
WAIT_S = 60.0
MODULE = "torchdbg_ranks_w"
#: The directory holding the package under test: a subprocess imports this one, not an
#: install elsewhere (the wire's version handshake would refuse another's workers: R59).
SOURCE = str(Path(wire.__file__).resolve().parents[3])

WORKER = '''
"""A DDP rank for tests/test_ranks_worker.py (steered by files in ``out``)."""
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def _read_int(out, name):
    try:
        with open(os.path.join(out, name)) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def train(index, rdv, out, world, step_s, fail_rank):
    torch.set_num_threads(1)
    timeout = timedelta(seconds=120)
    if rdv:
        dist.init_process_group("gloo", init_method=rdv, rank=index, world_size=world,
                                timeout=timeout)
    else:  # torchrun: env://
        dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    post = []
    step = 0
    while True:
        step += 1
        stop_at = _read_int(out, "stop_at")
        if rank == 1 and _read_int(out, "sleep_at") == step:
            time.sleep(3.0)  # the sleeping rank
        g = torch.Generator().manual_seed(1000 * rank + step)
        x = torch.randn(8, 6, generator=g) * (1.0 + 3.0 * rank)
        opt.zero_grad()
        ddp(x).pow(2).mean().backward()
        opt.step()
        post.append(float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])))
        if stop_at is not None and step >= stop_at:
            break
        time.sleep(step_s)
    state = {"state": model.state_dict(), "lr": opt.param_groups[0]["lr"], "post": post}
    torch.save(state, os.path.join(out, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()
    if rank == fail_rank:
        raise ValueError(f"rank {rank} failed on purpose")


if __name__ == "__main__":  # torchrun
    import sys
    train(int(os.environ["RANK"]), None, sys.argv[1], int(os.environ["WORLD_SIZE"]), 0.01, -1)
'''

FORK_LAUNCHER = """
import os
import sys
import torch.multiprocessing as mp
from jupyterlab_torchdbg.ranks.kernel import worker_env

address, key, rdv, out = sys.argv[1:5]
sys.path.insert(0, out)
import {module} as w

cleanup = worker_env.install(address, key)  # what %load_ext does in the kernel
print(os.getpid(), flush=True)
mp.start_processes(w.train, args=(rdv, out, 2, 0.01, -1), nprocs=2, start_method="fork")
cleanup()
"""


class Kernel:
    """The kernel's side in the test: an endpoint and every message it verified."""

    def __init__(self) -> None:
        self.messages: list[tuple[bytes, str, dict[str, Any]]] = []
        self.arrived: list[float] = []
        self._cond = threading.Condition()
        self.ep = Endpoint(self._on_message)

    def _on_message(self, worker_id: bytes, msg_type: str, content: dict[str, Any]) -> None:
        with self._cond:
            self.messages.append((worker_id, msg_type, content))
            self.arrived.append(time.monotonic())
            self._cond.notify_all()

    def wait(self, what: str, pred: Callable[[], bool], timeout: float = WAIT_S) -> None:
        with self._cond:
            ok = self._cond.wait_for(pred, timeout)
        assert ok, f"{what}: {self.summary()}"

    def summary(self) -> str:
        return str([(self.rank_of(w), t, str(c)[:200]) for w, t, c in self.messages[-12:]])

    def of(self, msg_type: str) -> list[tuple[bytes, dict[str, Any]]]:
        return [(w, c) for w, t, c in list(self.messages) if t == msg_type]

    def hellos(self) -> dict[bytes, dict[str, Any]]:
        return {w: c for w, c in self.of("hello")}

    def rank_of(self, worker_id: bytes) -> int | None:
        hello = self.hellos().get(worker_id)
        return None if hello is None else int(hello["identity"]["rank"])

    def workers(self) -> dict[int, bytes]:
        return {int(c["identity"]["rank"]): w for w, c in self.hellos().items()}

    def rows(self, rank: int) -> list[dict[str, Any]]:
        return [r for w, c in self.of("rows") if self.rank_of(w) == rank for r in c["rows"]]

    def step(self, rank: int) -> int:
        return max((r["step"] for r in self.rows(rank)), default=0)

    def send_all(self, msg_type: str, content: dict[str, Any]) -> None:
        for worker_id in self.workers().values():
            self.ep.send(worker_id, msg_type, content)

    def agree(self, action: str, args: dict[str, Any], commit: bool = True) -> tuple[str, int]:
        """Two-phase, as the kernel side does: prepare at a step ahead of every rank;
        commit (or cancel) once both acked ok; retried further ahead if too late."""
        margin = 15
        for _ in range(4):
            action_id = uuid.uuid4().hex
            at_step = max(self.step(0), self.step(1)) + margin
            prepare = {"action_id": action_id, "action": action, "args": args}
            self.send_all("prepare", {**prepare, "at_step": at_step})

            def acks() -> list[dict[str, Any]]:
                return [c for _, c in self.of("ack") if c["action_id"] == action_id]

            self.wait("acks", lambda: len(acks()) == 2)
            if all(c["ok"] for c in acks()):
                self.send_all("commit" if commit else "cancel", {"action_id": action_id})
                return action_id, at_step
            self.send_all("cancel", {"action_id": action_id})
            margin *= 2
        raise AssertionError(f"no agreement for {action}: {self.summary()}")

    def applied(self, action_id: str) -> list[tuple[int | None, int]]:
        mine = [(w, c) for w, c in self.of("applied") if c["action_id"] == action_id]
        return sorted((self.rank_of(w), c["step"]) for w, c in mine)

    def close(self) -> None:
        self.ep.close()


@pytest.fixture(scope="module")
def worker_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ranks_worker_mod")
    (d / f"{MODULE}.py").write_text(WORKER)
    return d


@pytest.fixture
def kernel() -> Any:
    k = Kernel()
    yield k
    k.close()


def _import_worker(worker_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(worker_dir))
    import importlib

    return importlib.import_module(MODULE)


def _sampled(k: Kernel, rank: int) -> dict[int, Any]:
    return {r["step"]: r["norm"] for r in k.rows(rank) if r["norm"] is not None}


def _equal_norms_at_common_steps(k: Kernel, minimum: int = 3) -> list[int]:
    n0, n1 = _sampled(k, 0), _sampled(k, 1)
    common = sorted(n0.keys() & n1.keys())
    assert len(common) >= minimum, (sorted(n0), sorted(n1))
    assert all(n0[s] == n1[s] for s in common), [(s, n0[s], n1[s]) for s in common]
    return common


def _identities(k: Kernel) -> dict[int, dict[str, Any]]:
    return {int(c["identity"]["rank"]): c for c in k.hellos().values()}


def _join(ctx: Any, timeout: float) -> BaseException | None:
    """Join an mp context; the exception a failed rank made it raise, or None."""
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise AssertionError("the ranks did not end")
    except mp.ProcessRaisedException as e:
        return e
    return None


# --- mp.spawn: one job, many checks ---------------------------------------------------


def test_spawned_ranks_stream_agree_pause_hang_and_fail(
    kernel: Kernel, worker_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = _import_worker(worker_dir, monkeypatch)
    k = kernel
    out = tmp_path / "out"
    out.mkdir()
    rdv = f"file://{tmp_path / 'rdv'}"
    cleanup = worker_env.install(k.ep.address, k.ep.key)
    try:
        ctx = mp.start_processes(
            w.train, args=(rdv, str(out), 2, 0.02, 1), nprocs=2, join=False, start_method="spawn"
        )
    finally:
        cleanup()  # the ranks inherited the environment already
    try:
        # hello from both ranks, one job; rows with equal norms at the same steps
        k.wait("hello", lambda: len(k.hellos()) == 2, JOB_TIMEOUT_S)
        ids = _identities(k)
        assert sorted(ids) == [0, 1]
        for rank, hello in ids.items():
            assert hello["identity"]["world_size"] == 2
            assert hello["identity"]["launcher"] == "spawn"
            assert hello["identity"]["local_rank"] == rank
            assert hello["torch"] == torch.__version__
        assert ids[0]["job_key"] == ids[1]["job_key"] == f"ppid:{os.getpid()}"
        k.wait("rows", lambda: len(_sampled(k, 0).keys() & _sampled(k, 1).keys()) >= 3)
        _equal_norms_at_common_steps(k)
        layers = [c["layers"] for _, c in k.of("rows") if c["layers"]]
        # the kernel's names: the script's variable, DDP's "module." level dropped; sent
        # in a rank's first report of them, the next ones name only their layout
        named = [x for x in layers if "names" in x]
        assert named and named[-1]["names"] == ["model.0", "model.2"]
        assert {x["layout"] for x in layers} == {layout_of(["model.0", "model.2"])}
        for worker_id in k.workers().values():
            first = next(c["layers"] for w, c in k.of("rows") if w == worker_id and c["layers"])
            assert first["names"] == ["model.0", "model.2"]

        # prepare / cancel: acked by both, applied by none
        cancelled, _ = k.agree("scale_lr", {"factor": 0.5}, commit=False)
        # prepare / commit: a clip applied at the agreed step on both ranks
        clipped, clip_step = k.agree("clip", {"max_norm": 1e-3})
        k.wait("clip applied", lambda: len(k.applied(clipped)) == 2)
        assert k.applied(clipped) == [(0, clip_step), (1, clip_step)]

        # pause: held at the agreed step until resume
        paused, pause_step = k.agree("pause", {})
        k.wait("pause applied", lambda: len(k.applied(paused)) == 2)
        assert k.applied(paused) == [(0, pause_step), (1, pause_step)]
        beats_before = len(k.of("heartbeat"))

        def paused_beats() -> set[int | None]:
            beats = k.of("heartbeat")[beats_before:]
            return {k.rank_of(wid) for wid, c in beats if c["phase"] == "paused"}

        k.wait("paused heartbeats", lambda: paused_beats() == {0, 1})
        assert max(k.step(0), k.step(1)) == pause_step  # no step past the agreed one
        k.send_all("resume", {})
        k.wait("resumed", lambda: min(k.step(0), k.step(1)) > pause_step + 2)

        # a rank that sleeps in its own code: its heartbeat carries its stack, the other
        # rank's says it waits in torch
        k.send_all("config", {"hang_s": 0.5})
        beats_before = len(k.of("heartbeat"))
        (out / "sleep_at").write_text(str(max(k.step(0), k.step(1)) + 5))

        def stack_of_1() -> list[str] | None:
            for wid, c in k.of("heartbeat")[beats_before:]:
                if k.rank_of(wid) == 1 and c["stack"]:
                    return list(c["stack"])
            return None

        k.wait("stack of the sleeping rank", lambda: stack_of_1() is not None)
        stack = stack_of_1() or []
        assert "time.sleep(3.0)" in stack[-1] and f"{MODULE}.py" in stack[-1], stack

        def rank_0_waits() -> bool:
            beats = k.of("heartbeat")[beats_before:]
            return any(k.rank_of(wid) == 0 and c["phase"] == "torch_wait" for wid, c in beats)

        k.wait("rank 0 waiting in the collective", rank_0_waits)

        # the end: rank 1 raises after saving; both say bye
        (out / "stop_at").write_text(str(max(k.step(0), k.step(1)) + 10))
        error = _join(ctx, JOB_TIMEOUT_S)
        assert error is not None and "failed on purpose" in str(error)
        k.wait("bye", lambda: len(k.of("bye")) == 2)
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()

    byes = {k.rank_of(wid): c["state"] for wid, c in k.of("bye")}
    assert byes == {0: "exited", 1: "failed"}
    exceptions = [(k.rank_of(wid), c) for wid, c in k.of("exception")]
    assert len(exceptions) == 1 and exceptions[0][0] == 1
    exc = exceptions[0][1]
    assert exc["exception"]["type"] == "ValueError"
    assert "failed on purpose" in exc["exception"]["message"]
    assert exc["step"] >= clip_step and exc["frames"]
    assert not any("mp_wrap" in f["file"] for f in exc["frames"]), exc["frames"]

    assert not k.applied(cancelled)
    saved = [torch.load(out / f"rank{r}.pt") for r in (0, 1)]
    # replicas bit-identical after the clip; the lr change was cancelled
    for name, value in saved[0]["state"].items():
        assert torch.equal(value, saved[1]["state"][name]), name
    assert saved[0]["lr"] == saved[1]["lr"] == 0.1
    post = saved[0]["post"]
    assert all(n <= 1e-3 * (1 + 1e-4) for n in post[clip_step - 1 :]), post[clip_step - 1 :]
    assert max(post[: clip_step - 1]) > 1e-2
    _equal_norms_at_common_steps(k)
    assert k.ep.refused == 0
    # every kind a worker sends, each as wire.schema.json describes it (R59)
    schema = json.loads(Path(wire.__file__).with_name("wire.schema.json").read_text())
    assert {t for _, t, _ in k.messages} == set(schema["x-worker-kinds"])
    for _, msg_type, content in k.messages:
        jsonschema.validate(content, {**schema, "$ref": f"#/$defs/{msg_type}"})
    # the layer names went in some reports, not every one
    layers = [c["layers"] for _, c in k.of("rows") if c["layers"]]
    assert 0 < sum("names" in x for x in layers) < len(layers)
    # at most 10 messages a second per rank in the steady state (rows or heartbeat)
    for worker_id in k.workers().values():
        times = [
            at
            for at, (wid, t, _) in zip(k.arrived, k.messages, strict=True)
            if wid == worker_id and t in ("rows", "heartbeat")
        ]
        assert len(times) <= 10 * (times[-1] - times[0]) + 5, len(times)


# --- fork ---------------------------------------------------------------------------


def test_forked_ranks_from_an_installed_process(
    kernel: Kernel, worker_dir: Path, tmp_path: Path
) -> None:
    """notebook_launcher's way: ``start_processes(start_method="fork")`` from a process
    where the kernel side is installed; the parent never steps, so it never connects."""
    k = kernel
    out = tmp_path / "out"
    out.mkdir()
    (out / "stop_at").write_text("12")
    (out / f"{MODULE}.py").write_text((worker_dir / f"{MODULE}.py").read_text())
    launcher = tmp_path / "launch.py"
    launcher.write_text(FORK_LAUNCHER.format(module=MODULE))
    env = {n: v for n, v in os.environ.items() if not n.startswith("TORCHDBG_")}
    env["PYTHONPATH"] = SOURCE  # no boot directory: only the package under test
    proc = subprocess.run(
        [sys.executable, str(launcher), k.ep.address, k.ep.key, f"file://{tmp_path}/rdv", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    k.wait("bye", lambda: len(k.of("bye")) == 2)
    ids = _identities(k)
    assert sorted(ids) == [0, 1]
    assert {h["identity"]["launcher"] for h in ids.values()} == {"fork"}
    assert {h["job_key"] for h in ids.values()} == {f"ppid:{proc.stdout.split()[0]}"}
    assert all(h["identity"]["pid"] != int(proc.stdout.split()[0]) for h in ids.values())
    assert {c["state"] for _, c in k.of("bye")} == {"exited"}
    assert k.step(0) == k.step(1) == 12
    _equal_norms_at_common_steps(k)


# --- torchrun -----------------------------------------------------------------------


def test_torchrun_subprocess_attaches_by_itself(
    kernel: Kernel, worker_dir: Path, tmp_path: Path
) -> None:
    """``!torchrun --nproc_per_node 2 script.py`` from the notebook: the environment
    (endpoint, key, boot dir on PYTHONPATH) is all the ranks need. torchrun's own
    process imports torch too but never steps: it never says hello."""
    k = kernel
    out = tmp_path / "out"
    out.mkdir()
    (out / "stop_at").write_text("10")
    env = {n: v for n, v in os.environ.items() if not n.startswith("TORCHDBG_")}
    env[wire.ENDPOINT_ENV] = k.ep.address
    env[wire.KEY_ENV] = k.ep.key
    env["PYTHONPATH"] = os.pathsep.join([worker_env.BOOT_DIR, env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(worker_dir / f"{MODULE}.py"),
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    k.wait("bye", lambda: len(k.of("bye")) == 2)
    ids = _identities(k)
    assert sorted(ids) == [0, 1] and len(k.hellos()) == 2
    for rank, hello in ids.items():
        assert hello["identity"]["launcher"] == "torchrun"
        assert hello["identity"]["local_rank"] == rank
        assert hello["identity"]["world_size"] == 2
    assert ids[0]["job_key"] == ids[1]["job_key"]
    assert k.step(0) == k.step(1) == 10
    _equal_norms_at_common_steps(k)


# --- one worker in this process (no subprocess): laziness, safety, a lost kernel ------


def _wait_until(pred: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _train_steps(opt: torch.optim.Optimizer, model: torch.nn.Module, n: int) -> None:
    for _ in range(n):
        opt.zero_grad()
        model(torch.randn(4, 6)).pow(2).sum().backward()
        opt.step()


def test_worker_is_lazy_never_raises_and_a_lost_kernel_releases_a_pause(
    kernel: Kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing (no thread, no socket) before the first step; a broken optimizer's step
    is counted, never raised; a rank that reaches the agreed step before the decision
    holds there for it (cancel: nothing applied; commit: applied at that step); a rank
    paused by a kernel that then goes away resumes by itself once it has been
    unreachable for LOST_RELEASE_S."""
    from jupyterlab_torchdbg.ranks.worker import agent as agent_mod
    from jupyterlab_torchdbg.ranks.worker import agreed as agreed_mod
    from jupyterlab_torchdbg.ranks.worker.boundary import Worker

    monkeypatch.setattr(agent_mod, "LOST_RELEASE_S", 0.5)
    monkeypatch.setattr(agreed_mod, "DECIDE_S", WAIT_S)  # a rank holds for the decision
    k = kernel
    w = Worker(k.ep.address, k.ep.key)
    threads = threading.active_count()
    assert w.agent is None and threading.active_count() == threads

    class Broken:
        @property
        def param_groups(self) -> list[Any]:
            raise RuntimeError("broken")

    broken = Broken()
    w.before_step(broken)  # counted (its step 1 is read in vain), never raised
    assert w.errors["step"] == 1
    # still alive (as a traceback or a cycle may keep it): an object whose step cannot be
    # read gives up being the rank's step, and the next optimizer to step takes over

    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    HOOKS.adopt(w)  # the process's step hooks call the worker (as activation.py does)
    try:
        _train_steps(opt, model, 3)
        assert w.agent is not None and w.agent.alive
        k.wait("hello and rows", lambda: len(k.hellos()) == 1 and k.step(0) == 4)
        hello = next(iter(k.hellos().values()))
        assert hello["identity"]["rank"] == 0 and hello["identity"]["world_size"] == 1
        layers = [c["layers"] for _, c in k.of("rows") if c["layers"]]
        assert layers[0]["names"] == ["model.0", "model.1"]  # the model in this frame's locals

        # a single rank, agreed by hand; both actions reached before their decision
        worker_id = next(iter(k.hellos()))
        for action_id, action, args, at_step in (
            ("lr", "scale_lr", {"factor": 0.5}, 6),
            ("p", "pause", {}, 8),
        ):
            prepare = {"action_id": action_id, "action": action, "args": args}
            k.ep.send(worker_id, "prepare", {**prepare, "at_step": at_step})
        acked = lambda: sorted(c["action_id"] for _, c in k.of("ack") if c["ok"])  # noqa: E731
        k.wait("acks", lambda: acked() == ["lr", "p"])
        done = threading.Event()
        trainer = threading.Thread(target=lambda: (_train_steps(opt, model, 6), done.set()))
        trainer.start()

        def holding_at(step: int) -> Callable[[], bool]:
            return lambda: w.agreed.holding and w.agreed.step == step

        assert _wait_until(holding_at(6)), "no hold at step 6 for the decision"
        k.ep.send(worker_id, "cancel", {"action_id": "lr"})
        assert _wait_until(holding_at(8)), "no hold at step 8 for the decision"
        k.ep.send(worker_id, "commit", {"action_id": "p"})
        k.wait("paused at step 8", lambda: bool(k.applied("p")))
        assert k.applied("p") == [(0, 8)] and not k.applied("lr") and not done.is_set()
        assert opt.param_groups[0]["lr"] == 0.01  # the cancelled change never applied
        k.ep.close()  # the kernel goes away without a resume
        assert done.wait(WAIT_S), "the pause outlived the kernel"
        trainer.join()
        assert w.agent.errors["resumed:lost"] == 1
    finally:
        HOOKS.release(w)
        w.close("exited")
    assert HOOKS.wait_idle(5) and HOOKS.target is None


ATTACH_SCRIPT = """
import sys
import jupyterlab_torchdbg

assert "torch" not in sys.modules
assert jupyterlab_torchdbg.attach(sys.argv[1], sys.argv[2])
import torch

model = torch.nn.Linear(3, 1)
opt = torch.optim.Adam(model.parameters())
for _ in range(5):
    opt.zero_grad()
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
"""


def test_a_script_started_elsewhere_attaches_with_one_line(kernel: Kernel, tmp_path: Path) -> None:
    """``jupyterlab_torchdbg.attach(endpoint, key)`` before torch is even imported; the
    process says bye at its normal exit (atexit)."""
    k = kernel
    script = tmp_path / "elsewhere.py"
    script.write_text(ATTACH_SCRIPT)
    env = {n: v for n, v in os.environ.items() if not n.startswith("TORCHDBG_")}
    env["PYTHONPATH"] = SOURCE  # no boot directory: only the package under test
    proc = subprocess.run(
        [sys.executable, str(script), k.ep.address, k.ep.key],
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    k.wait("bye", lambda: len(k.of("bye")) == 1)
    (hello,) = k.hellos().values()
    assert hello["identity"]["launcher"] == "attach" and hello["identity"]["rank"] == 0
    assert k.step(0) == 5 and [c["state"] for _, c in k.of("bye")] == ["exited"]


FORK_FROM_LOADED = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import torch
from grads_support import session
from jupyterlab_torchdbg.kernel.step_boundary import HOOKS
from jupyterlab_torchdbg.ranks.worker import activation

model = torch.nn.Linear(3, 2)
with session({"model": model}) as s:
    s.ext.scan_models()  # the kernel's end-of-backward hooks on the namespace's model
    backward = s.ext.boundary.backward
    seen = {"parent": [type(HOOKS.target).__name__, backward.hooked_params()]}
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        child = [type(HOOKS.target).__name__, backward.hooked_params()]
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(2, 3)).sum().backward()
        opt.step()
        worker = activation.current()
        child += [worker.agreed.step, worker.agent is not None]
        worker.close("exited")
        os.write(w, json.dumps(child).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    seen["child"] = json.loads(os.read(r, 10000))
    seen["after"] = [type(HOOKS.target).__name__, backward.hooked_params()]
print(json.dumps(seen))
"""


def test_a_fork_of_a_loaded_kernel_becomes_a_worker(tmp_path: Path) -> None:
    """A child forked from a kernel with the extension loaded: torch's hooks call a
    fresh worker there (``HOOKS.pin``), the kernel's end-of-backward hooks are gone
    from the child (never from the parent), and its step goes to the worker."""
    import json

    script = tmp_path / "fork_loaded.py"
    script.write_text(FORK_FROM_LOADED)
    env = {n: v for n, v in os.environ.items() if not n.startswith("TORCHDBG_")}
    env["PYTHONPATH"] = SOURCE  # no boot directory: only the package under test
    tests_dir = str(Path(__file__).parent)
    proc = subprocess.run(
        [sys.executable, str(script), tests_dir],
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["parent"] == ["StepBoundary", 1]
    assert seen["child"] == ["Worker", 0, 1, True]
    assert seen["after"] == ["StepBoundary", 1]


def test_a_loop_without_an_optimizer_counts_its_backward_passes_until_one_steps(
    kernel: Kernel,
) -> None:
    """A rank that updates its weights by hand: the model is found at its first call
    (the pre-hook then goes), every backward pass is a step (iteration N is step N, as
    with an optimizer: R56), rows carry its norms; once an optimizer steps the model, its
    first step is the step of the backward pass before it, the hooks go and the
    optimizer's steps continue the count."""
    from torch.nn.modules import module as module_mod

    from jupyterlab_torchdbg.ranks.worker.boundary import Worker

    k = kernel
    w = Worker(k.ep.address, k.ep.key)
    before = dict(module_mod._global_forward_pre_hooks)
    HOOKS.adopt(w)
    w.torch_ready()
    try:
        assert len(module_mod._global_forward_pre_hooks) == len(before) + 1
        model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
        for _ in range(4):
            model.zero_grad()
            model(torch.randn(8, 6)).pow(2).mean().backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
        assert dict(module_mod._global_forward_pre_hooks) == before  # found: the hook went
        assert w.manual.hooks.hooked_params() == 2  # one per module with parameters
        assert w.agreed.step == 4 and w.agreed.manual
        k.wait("rows with norms", lambda: k.step(0) == 4)
        norms = [r["norm"] for _, c in k.of("rows") for r in c["rows"] if r["norm"] is not None]
        assert norms and all(n > 0 for n in norms)

        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        _train_steps(opt, model, 2)
        assert w.manual.hooks.hooked_params() == 0  # the optimizer took the model over
        # the pass before the handover is one step (its backward, then the optimizer's
        # first step ending the same iteration): 6 iterations, 6 steps, one row each
        assert w.agreed.step == 4 + 2 and not w.agreed.manual
        k.wait("rows of every step", lambda: k.step(0) == 6)
        assert sorted(r["step"] for r in k.rows(0)) == [1, 2, 3, 4, 5, 6]
        assert w.errors == {}
    finally:
        HOOKS.release(w)
        w.manual.remove()
        w.close("exited")
    assert HOOKS.wait_idle(5) and HOOKS.target is None
