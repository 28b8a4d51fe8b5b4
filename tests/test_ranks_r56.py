"""R56: the ranks' bookkeeping is bounded and true, checked with real processes.

The kernel's side runs in the test process as ``%load_ext`` wires it (attach.py): a
``RankHub`` fed by a real ``Endpoint``, the endpoint published to the processes started
from here (``worker_env.install``: spawned ranks attach by themselves, torch's join is
wrapped) and torch's join telling the hub the exit codes it reaps. Ranks are real torch
processes (``mp.start_processes``, gloo on CPU); the jobs in a row and the process that
claims another rank's slot are real processes speaking the signed wire (``wire.py``)
with the session key, as any process holding the key can.

- 40 jobs in a row: the hub keeps ``KEEP_ENDED`` jobs, their keys and workers only;
- ``kill -9`` of a rank: that rank is ``failed`` with SIGKILL within 2 s (read from the
  unjoined child, and from torch's join when it reaps it); the other rank is not;
- a rank that updates its weights by hand beside one with an optimizer, under DDP: the
  same step numbers, the same norms at each, no desync alarm;
- a second hello for a live rank's slot is refused with its reason, and an exception
  sent by that process is not accepted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessExitedException

from jupyterlab_torchdbg.ranks.kernel import aggregator, worker_env
from jupyterlab_torchdbg.ranks.kernel.aggregator import RankHub
from jupyterlab_torchdbg.ranks.kernel.endpoint import Endpoint
from jupyterlab_torchdbg.ranks.worker import mp_wrap

#: A spawn is a torch import per process on a busy machine.
JOB_TIMEOUT_S = 240.0
MODULE = "torchdbg_r56_ranks"

RANKS = '''
"""Ranks for tests/test_ranks_r56.py (steered by files in ``out``)."""
import os
import time

import torch
import torch.distributed as dist
from torch import nn


def train(index, rdv, out, mode, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=rdv, rank=index, world_size=2)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    g = torch.Generator().manual_seed(1000 + rank)
    if mode == "mixed":  # DDP; rank 0 steps an optimizer, rank 1 updates by hand
        ddp = nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05) if rank == 0 else None
        for _ in range(steps):
            loss = ddp(torch.randn(8, 6, generator=g) * (1 + rank)).pow(2).mean()
            ddp.zero_grad()
            loss.backward()
            if opt is not None:
                opt.step()
            else:
                with torch.no_grad():
                    for p in ddp.parameters():
                        p -= 0.05 * p.grad
            time.sleep(0.03)
    else:  # "local": each rank on its own (no collective; the same data), until out/stop
        g = torch.Generator().manual_seed(1000)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        while not os.path.exists(os.path.join(out, "stop")):
            opt.zero_grad()
            model(torch.randn(8, 6, generator=g)).pow(2).mean().backward()
            opt.step()
            time.sleep(0.03)
    dist.destroy_process_group()
'''

FAKE = """
import os, socket, sys, time
from jupyterlab_torchdbg.ranks.wire import transport as wire

address, key, mode = sys.argv[1:4]
SESSIONS = {}


def S(sock):  # one signing session per socket: its counter orders that stream (R58)
    return SESSIONS.setdefault(id(sock), wire.session(key))


def hello(sock, rank, world, job_key):
    identity = {"rank": rank, "world_size": world, "local_rank": rank,
                "host": socket.gethostname(), "pid": os.getpid(), "launcher": "attach"}
    wire.send(S(sock), sock, "hello", {"identity": identity, "job_key": job_key, "torch": ""})


def reply(sock, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.poll(100):
            return wire.recv(S(sock), sock)
    raise SystemExit("no reply from the kernel")


if mode == "jobs":  # N two-rank jobs in a row: hello, one step, bye
    for j in range(int(sys.argv[4])):
        socks = [wire.connect(address, key) for _ in range(2)]
        for rank, (_, sock) in enumerate(socks):
            hello(sock, rank, 2, f"10.0.0.1:{20000 + j}:2")
            reply(sock)  # config
        for _, sock in socks:
            row = {"step": 1, "t": 0.0, "dt": 0.1, "norm": 1.0, "mem": 1, "mem_kind": "host"}
            wire.send(S(sock), sock, "rows", {"rows": [row], "own": 0.5, "phase": "user"})
            wire.send(S(sock), sock, "bye", {"state": "exited"})
        for ctx, sock in socks:
            sock.close(wire.LINGER_MS)
            ctx.term()
elif mode == "hold":  # rank 0 of the job argv[4] names, beating until argv[5] exists
    ctx, sock = wire.connect(address, key)
    hello(sock, 0, int(sys.argv[4].rsplit(":", 1)[1]), sys.argv[4])
    reply(sock)
    print("ready", flush=True)
    while not os.path.exists(sys.argv[5]):
        wire.send(S(sock), sock, "heartbeat", {"step": 0, "since_step_s": None, "phase": "user"})
        time.sleep(0.2)
    wire.send(S(sock), sock, "bye", {"state": "exited"})
    sock.close(wire.LINGER_MS)
    ctx.term()
elif mode == "claim":  # says hello as rank 0 too, then raises in its name
    ctx, sock = wire.connect(address, key)
    hello(sock, 0, 2, sys.argv[4])
    got = reply(sock)
    print(got[1], got[2].get("reason", ""), flush=True)
    exc = {"exception": {"type": "RuntimeError", "module": "builtins",
                         "message": "forged", "message_truncated": False},
           "frames": [], "diagnosis": None, "step": 1}
    wire.send(S(sock), sock, "exception", exc)
    wire.send(S(sock), sock, "bye", {"state": "failed"})
    sock.close(wire.LINGER_MS)
    ctx.term()
"""


class KernelSide:
    """What ``%load_ext`` wires (attach.py), in this process: hub, endpoint, join."""

    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.hub = RankHub(self.out.append, self.errors.append, "r56")
        self.ep = Endpoint(self.hub.on_message)
        self.hub.endpoint = self.ep
        mp_wrap.exit_listener = getattr(self.hub, "process_exited", None)  # (as attach.py)
        self._uninstall = worker_env.install(self.ep.address, self.ep.key)

    def close(self) -> None:
        self._uninstall()
        mp_wrap.exit_listener = None
        self.ep.close()
        self.hub.close()

    def now(self) -> dict[str, Any]:
        return self.hub.message()

    def ranks(self) -> dict[int, dict[str, Any]]:
        return {r["identity"]["rank"]: r for r in self.now()["ranks"]}

    def alarms(self, kind: str) -> list[dict[str, Any]]:
        return [a for a in self.now()["alarms"] if a["kind"] == kind]

    def wait(self, what: str, pred: Callable[[], bool], timeout: float = JOB_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, f"{what}: {self.now()} {self.errors}"
            time.sleep(0.02)

    def fake(self, *args: str, shell: bool = False) -> subprocess.Popen[str]:
        """A process speaking the wire; ``shell``: started by a shell that waits for it
        (its parent, which reaps it: not a child of this process, as torchrun's ranks)."""
        env = {n: v for n, v in os.environ.items() if not n.startswith("TORCHDBG_")}
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
        via = ["sh", "-c", '"$@" & wait', "sh"] if shell else []
        return subprocess.Popen(
            [*via, sys.executable, "-c", FAKE, self.ep.address, self.ep.key, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def kernel() -> Iterator[KernelSide]:
    k = KernelSide()
    yield k
    k.close()


@pytest.fixture
def ranks_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / f"{MODULE}.py").write_text(RANKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    return importlib.import_module(MODULE)


def _start(ranks_module: Any, tmp_path: Path, mode: str, steps: int = 0) -> Any:
    out = tmp_path / f"out-{mode}-{time.monotonic_ns()}"
    out.mkdir()
    rdv = f"file://{out / 'rdv'}"
    ctx = mp.start_processes(
        ranks_module.train,
        args=(rdv, str(out), mode, steps),
        nprocs=2,
        join=False,
        start_method="spawn",
    )
    ctx.out = out
    return ctx


def _kill_all(ctx: Any) -> None:
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
        p.join(10)


def _stepping(k: KernelSide, job: int) -> Callable[[], bool]:
    def ok() -> bool:
        msg = k.now()
        ranks = msg["ranks"]
        return (
            msg["job"] is not None
            and msg["job"]["id"] == job
            and len(ranks) == 2
            and all(r["step"] >= 3 and r["state"] == "running" for r in ranks)
        )

    return ok


def test_r56_forty_jobs_in_a_row_keep_a_bounded_few(kernel: KernelSide) -> None:
    k = kernel
    proc = k.fake("jobs", "40")
    try:
        _, err = proc.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]

    def all_ended() -> bool:
        msg = k.now()
        return msg["job"] is not None and msg["job"]["id"] == 40 and msg["job"]["state"] == "ended"

    k.wait("job 40 ended", all_ended)
    hub = k.hub
    keep = aggregator.KEEP_ENDED
    assert [j.id for j in hub.jobs] == list(range(41 - keep, 41))
    assert len(hub._by_key) <= keep and len(hub._by_worker) <= 2 * keep
    assert set(hub._alarms) <= {j.id for j in hub.jobs}
    assert set(hub._job_cell) <= {j.id for j in hub.jobs}
    # the panel still shows the last job, with its ranks and points
    msg = k.now()
    assert [(r["identity"]["rank"], r["state"], r["step"]) for r in msg["ranks"]] == [
        (0, "exited", 1),
        (1, "exited", 1),
    ]
    assert k.errors == [] and k.ep.refused == 0


def test_r56_a_killed_rank_is_failed_with_its_signal_at_once(
    kernel: KernelSide, ranks_module: Any, tmp_path: Path
) -> None:
    """Read from the child before anyone joins it: the other rank keeps running."""
    k = kernel
    ctx = _start(ranks_module, tmp_path, "local")
    try:
        k.wait("both ranks stepping", _stepping(k, 1))
        pid = k.ranks()[1]["identity"]["pid"]
        assert pid in [p.pid for p in ctx.processes]
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        k.wait("rank 1 failed", lambda: k.ranks()[1]["state"] == "failed", timeout=10)
        assert time.monotonic() - killed <= 2.0
        (alarm,) = k.alarms("failed")
        assert alarm["rank"] == 1
        assert "killed by SIGKILL (signal 9)" in alarm["message"], alarm["message"]
        assert "another rank failed first" not in alarm["message"]
        time.sleep(0.5)
        assert k.ranks()[0]["state"] == "running"  # as it really is
        # rank 0 ends on its own; then torch's join reaps rank 1 (and raises, as it does)
        (ctx.out / "stop").write_text("")
        k.wait("rank 0 exited", lambda: k.ranks()[0]["state"] == "exited")
        with pytest.raises(ProcessExitedException, match="SIGKILL"):
            while not ctx.join(timeout=JOB_TIMEOUT_S):
                pass
    finally:
        _kill_all(ctx)
    final = k.now()
    assert [r["state"] for r in final["ranks"]] == ["exited", "failed"]
    assert [(a["kind"], a["rank"]) for a in final["alarms"]] == [("failed", 1)]
    assert final["job"]["state"] == "ended"


def test_r56_a_rank_killed_under_torchs_join_is_failed_the_rank_it_stops_is_not(
    kernel: KernelSide, ranks_module: Any, tmp_path: Path
) -> None:
    """As ``mp.spawn(join=True)`` runs in a notebook: torch's join reaps the killed rank
    at once and terminates the other one; the hub hears both exit codes from it."""
    k = kernel
    ctx = _start(ranks_module, tmp_path, "local")
    raised: list[BaseException] = []

    def spawn_join() -> None:  # what mp.spawn does after starting the processes
        try:
            while not ctx.join():
                pass
        except BaseException as e:
            raised.append(e)

    joiner = threading.Thread(target=spawn_join, daemon=True)
    try:
        k.wait("both ranks stepping", _stepping(k, 1))
        joiner.start()
        pid = k.ranks()[1]["identity"]["pid"]
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        k.wait("rank 1 failed", lambda: k.ranks()[1]["state"] == "failed", timeout=10)
        assert time.monotonic() - killed <= 2.0
        joiner.join(60)
        assert raised and "SIGKILL" in str(raised[0])
        k.wait("rank 0 ended", lambda: k.ranks()[0]["state"] != "running", timeout=10)
    finally:
        _kill_all(ctx)
    final = k.now()
    assert [r["state"] for r in final["ranks"]] == ["exited", "failed"]
    (alarm,) = [a for a in final["alarms"] if a["kind"] in ("failed", "lost")]
    assert alarm["rank"] == 1 and "killed by SIGKILL" in alarm["message"]


def test_r56_hand_updated_and_optimizer_ranks_count_the_same_steps(
    kernel: KernelSide, ranks_module: Any, tmp_path: Path
) -> None:
    k = kernel
    ctx = _start(ranks_module, tmp_path, "mixed", steps=40)
    try:
        while not ctx.join(timeout=JOB_TIMEOUT_S):
            pass
    finally:
        _kill_all(ctx)
    k.wait("job ended", lambda: k.now()["job"]["state"] == "ended", timeout=30)
    msg = k.hub.message(replay=True)
    assert msg["alarms"] == []  # (counting one behind, rank 1 was told desynced)
    assert [(r["state"], r["step"]) for r in msg["ranks"]] == [("exited", 40), ("exited", 40)]
    by_rank = {
        p["rank"]: {s: v for s, v in zip(p["steps"], p["grad_norm"], strict=True) if v is not None}
        for p in msg["points"]
    }
    assert [sorted(set(p["steps"])) for p in msg["points"]] == [list(range(1, 41))] * 2
    common = sorted(by_rank[0].keys() & by_rank[1].keys())
    assert len(common) >= 5, by_rank
    for s in common:
        assert by_rank[0][s] == pytest.approx(by_rank[1][s], rel=1e-5), (s, by_rank)


def test_r56_a_second_hello_for_a_live_ranks_slot_is_refused(
    kernel: KernelSide, tmp_path: Path
) -> None:
    k = kernel
    key, stop = "127.0.0.1:29999:2", str(tmp_path / "stop")
    holder = k.fake("hold", key, stop)
    claim: subprocess.Popen[str] | None = None
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        claim = k.fake("claim", key)
        said, err = claim.communicate(timeout=JOB_TIMEOUT_S)
        assert claim.returncode == 0, err[-3000:]
        reason = f"rank 0 is held by pid {holder.pid} on "
        assert said.startswith("refused " + reason), said
        k.wait("its messages refused", lambda: k.hub.refused_hellos >= 3, timeout=10)
        assert any(r.startswith(reason) for r in k.hub.refusals)
        now = k.now()
        assert [r["identity"]["pid"] for r in now["ranks"]] == [holder.pid]
        assert now["ranks"][0]["state"] != "failed" and now["alarms"] == []
        assert not [m for m in k.out if m["method"] == "exception"]  # nothing in its name
    finally:
        Path(stop).write_text("")
        holder.communicate(timeout=60)
        if claim is not None:
            claim.kill()
    k.wait("the holder's bye", lambda: k.ranks()[0]["state"] == "exited", timeout=10)
    assert not [m for m in k.out if m["method"] == "exception"]


def test_r56_a_killed_rank_another_process_reaps_is_failed_at_once(
    kernel: KernelSide, tmp_path: Path
) -> None:
    """A rank on this host the kernel is not the parent of (torchrun's agent reaps its
    ranks): gone from /proc, so ``failed`` at once, with its signal if /proc showed it
    before its parent reaped it, else saying the status was not seen."""
    k = kernel
    stop = str(tmp_path / "stop")
    shell = k.fake("hold", "127.0.0.1:29998:1", stop, shell=True)
    try:
        assert shell.stdout is not None and shell.stdout.readline().strip() == "ready"
        k.wait("rank 0 attached", lambda: 0 in k.ranks(), timeout=10)
        pid = k.ranks()[0]["identity"]["pid"]
        assert pid != shell.pid
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        k.wait("rank 0 failed", lambda: k.ranks()[0]["state"] == "failed", timeout=10)
        assert time.monotonic() - killed <= 2.0
    finally:
        Path(stop).write_text("")
        shell.communicate(timeout=60)
    (alarm,) = k.now()["alarms"]
    assert alarm["kind"] == "failed" and alarm["rank"] == 0
    said = alarm["message"]
    assert "killed by SIGKILL" in said or "ended without a word" in said, said
    assert k.now()["job"]["state"] == "ended"
