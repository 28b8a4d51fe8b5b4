"""Ranks on two hosts for real (issue #25): two network namespaces joined by a veth
pair stand for two machines (``10.77.X.1``: host A, with the kernel; ``10.77.X.2``: host
B), each with a host name of its own (a UTS namespace per process).

The kernel's side (tests/multihost_kernel.py) listens on TCP (``TORCHDBG_LISTEN``) on
host A's address; ``torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d`` runs
once on each host (gloo on the veth), every process with what ``ranks_env()`` says to
export, nothing more: the boot hook makes each rank a worker, which attaches over TCP
with the key. All four ranks must be in one job with their hosts, reach the last step
and end; a process on host B with another key is refused at the connection (R55), one
with the key but another job at each message and told why (R58), each counted; nothing
else is refused (R58, R59).

Needs root and ``ip netns`` (skipped otherwise, with the reason); about 30-60 s.
scripts/multihost-test.sh runs it on its own, with more steps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
STEPS = int(os.environ.get("TORCHDBG_MULTIHOST_STEPS", "30"))
TIMEOUT_S = float(os.environ.get("TORCHDBG_MULTIHOST_TIMEOUT_S", "150"))

TRAIN = """
import sys, time
import torch
import torch.distributed as dist
from torch import nn

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
model = nn.parallel.DistributedDataParallel(net)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(rank)
for _ in range(int(sys.argv[1])):
    opt.zero_grad()
    model(torch.randn(16, 8, generator=g)).pow(2).mean().backward()
    opt.step()
    time.sleep(0.03)
dist.destroy_process_group()
"""

STRANGER = """
import time
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(40):  # 2 s: time for the kernel's answer on a busy machine
    opt.zero_grad()
    model(torch.randn(4, 4)).sum().backward()
    opt.step()
    time.sleep(0.05)
"""


def _why_not() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "needs iproute2's ip and util-linux's unshare"
    probe = f"tdbg-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if made.returncode != 0:
        return f"ip netns is not available here: {made.stderr.strip()[:200]}"
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


class Hosts:
    """Two namespaces (hosts A and B) joined by a veth pair; removed on ``close``."""

    def __init__(self) -> None:
        tag = os.getpid() % 100000
        self.subnet = f"10.77.{tag % 250 + 1}"
        self.ns = {"a": f"tdbg-a-{tag}", "b": f"tdbg-b-{tag}"}
        self.dev = {"a": f"tdva{tag}", "b": f"tdvb{tag}"}
        self.addr = {"a": f"{self.subnet}.1", "b": f"{self.subnet}.2"}
        self.made: list[str] = []
        for side in ("a", "b"):
            _ip("netns", "add", self.ns[side])
            self.made.append(self.ns[side])
        _ip("link", "add", self.dev["a"], "type", "veth", "peer", "name", self.dev["b"])
        for side in ("a", "b"):
            ns, dev = self.ns[side], self.dev[side]
            _ip("link", "set", dev, "netns", ns)
            _ip("addr", "add", f"{self.addr[side]}/24", "dev", dev, ns=ns)
            _ip("link", "set", dev, "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)
        # the hosts know each other by name (as a cluster's DNS): ``ip netns exec`` mounts
        # /etc/netns/NAME/hosts over /etc/hosts
        names = "".join(f"{self.addr[s]} tdbg-host-{s}\n" for s in ("a", "b"))
        for ns in self.ns.values():
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{names}")

    def command(self, side: str, argv: list[str]) -> list[str]:
        """``argv`` on host ``side``, under that host's name (``tdbg-host-a`` / ``-b``)."""
        script = 'hostname "$0" && exec "$@"'
        return [
            "ip", "netns", "exec", self.ns[side],
            "unshare", "--uts", "sh", "-c", script, f"tdbg-host-{side}", *argv,
        ]  # fmt: skip

    def close(self) -> None:
        for ns in self.made:  # deleting a namespace deletes its end of the veth pair
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        self.made.clear()


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    why = _why_not()
    if why is not None:
        pytest.skip(why)
    h = Hosts()
    try:
        yield h
    finally:
        h.close()


class KernelSide:
    """tests/multihost_kernel.py on host A, asked for its state over a pipe."""

    def __init__(self, hosts: Hosts, env: dict[str, str]) -> None:
        listen = hosts.addr["a"]  # a random port
        self.proc = subprocess.Popen(
            hosts.command("a", [sys.executable, str(ROOT / "tests" / "multihost_kernel.py")]),
            env={**env, "TORCHDBG_LISTEN": listen},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.hello = self._line()

    def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the kernel side ended ({self.proc.poll()})"
        got: dict[str, Any] = json.loads(line)
        return got

    def state(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("state\n")
        self.proc.stdin.flush()
        return self._line()

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            self.proc.wait(10)
        except Exception:
            self.proc.kill()
            self.proc.wait(10)


def _base_env() -> dict[str, str]:
    env = {n: v for n, v in os.environ.items() if not n.startswith(("TORCHDBG_", "GLOO_"))}
    env["PYTHONPATH"] = str(ROOT)  # this checkout, in every process
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_a_2x2_torchrun_job_on_two_hosts_attaches_over_tcp(hosts: Hosts, tmp_path: Path) -> None:
    base = _base_env()
    kernel = KernelSide(hosts, base)
    procs: list[subprocess.Popen[str]] = []
    try:
        exported = kernel.hello["env"]
        assert kernel.hello["transport"] == "tcp"
        assert exported["TORCHDBG_ENDPOINT"].startswith(f"tcp://{hosts.addr['a']}:")
        train = tmp_path / "train.py"
        train.write_text(TRAIN)
        for side in ("a", "b"):
            env = {**base, **exported, "GLOO_SOCKET_IFNAME": hosts.dev[side]}
            env["PYTHONPATH"] = f"{exported['PYTHONPATH']}{os.pathsep}{base['PYTHONPATH']}"
            argv = [
                sys.executable, "-m", "torch.distributed.run",
                "--nnodes=2", "--nproc-per-node=2", "--max-restarts=0",
                "--rdzv-backend=c10d", f"--rdzv-endpoint={hosts.addr['a']}:29500",
                "--rdzv-id=tdbg-multihost", f"--local-addr={hosts.addr[side]}",
                str(train), str(STEPS),
            ]  # fmt: skip
            with open(tmp_path / f"torchrun-{side}.log", "w") as log:
                procs.append(
                    subprocess.Popen(
                        hosts.command(side, argv), env=env, stdout=log, stderr=subprocess.STDOUT
                    )
                )
        # processes on host B with another key, and with the key but another job
        stranger = tmp_path / "stranger.py"
        stranger.write_text(STRANGER)
        told = tmp_path / "other-job.log"
        for change, out in (
            ({"TORCHDBG_KEY": "0f" * 32}, None),
            ({"TORCHDBG_JOB_ID": "0" * 16}, told),
        ):
            env = {**base, **exported, **change}
            env["PYTHONPATH"] = f"{exported['PYTHONPATH']}{os.pathsep}{base['PYTHONPATH']}"
            with open(out or os.devnull, "w") as sink:
                procs.append(
                    subprocess.Popen(
                        hosts.command("b", [sys.executable, str(stranger)]),
                        env=env,
                        stdout=sink,
                        stderr=subprocess.STDOUT,
                    )
                )
        deadline = time.monotonic() + TIMEOUT_S
        for p in procs:
            p.wait(max(1.0, deadline - time.monotonic()))
        logs = {s: (tmp_path / f"torchrun-{s}.log").read_text()[-3000:] for s in ("a", "b")}
        assert [p.returncode for p in procs] == [0, 0, 0, 0], logs

        def done(s: dict[str, Any]) -> bool:
            ranks = [r for j in s["jobs"] for r in j["ranks"]]
            return len(ranks) == 4 and all(r["ended"] for r in ranks)

        state = kernel.state()
        while not done(state) and time.monotonic() < deadline:
            time.sleep(0.2)
            state = kernel.state()
        (job,) = state["jobs"]
        ranks = job["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1, 2, 3], state
        assert all(r["world"] == 4 for r in ranks), state
        by_host: dict[str, list[int]] = {}
        for r in ranks:
            by_host.setdefault(r["host"], []).append(r["rank"])
        assert sorted(by_host) == ["tdbg-host-a", "tdbg-host-b"], state
        assert all(len(v) == 2 for v in by_host.values()), state
        assert [(r["step"], r["ended"]) for r in ranks] == [(STEPS, "exited")] * 4, state
        assert job["key"].startswith(f"{hosts.addr['a']}:") or "torchelastic" in job["key"]
        # the strangers: another key refused at the connection, another job at each
        # message (and told why); nothing else refused
        assert state["refusals"].get("key", 0) >= 1, state
        assert state["refusals"].get("job", 0) >= 2, state
        assert set(state["refusals"]) == {"key", "job"}, state
        assert "the kernel refused this rank" in told.read_text(), (told.read_text(), state)
        assert not state["errors"], state
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        kernel.close()
