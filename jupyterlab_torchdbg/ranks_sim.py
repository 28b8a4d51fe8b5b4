"""Simulated ranks: N workers' real wire messages, from a few processes (not public API).

Used by the benchmark (``bench/ranks_sim.py``, ``--ranks-sim``) and by the UI tests
(``start`` from a notebook cell: the kernel's endpoint is in its environment). Each
simulated rank is what a worker's agent is on the wire: its own DEALER socket connected
with ``wire.connect`` (the connect token), its own Jupyter session (``wire.session``:
HMAC-signed, replay-checked), and an ``Agent`` (ranks/worker/agent.py) whose own methods
build and send the messages (``hello``, ``rows`` every ``rows_s`` while it steps,
``heartbeat`` every ``heartbeat_s`` without rows, ``bye``) at the agent's cadence, as
the kernel's ``config`` sets it. Only the training is simulated: a rank steps
every ``step_s`` (rank ``SLOW`` is 6x slower), with a norm on every step, the same
on every rank at a step as after DDP's all-reduce (rank ``HIGH_NORM``'s is 8x the
others': a desynced replica) and its layers (6, or ``layers``: a real model's hundreds);
both modulo the world size.

Run as ``python -m jupyterlab_torchdbg.ranks_sim FIRST COUNT WORLD SECONDS [STEP_S [LAYERS]]``
with ``TORCHDBG_ENDPOINT`` / ``TORCHDBG_KEY`` in the environment (as every worker has).
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import time
from collections import deque
from typing import TYPE_CHECKING

from .ranks.wire import packed
from .ranks.wire import transport as wire

if TYPE_CHECKING:
    import zmq
    from jupyter_client.session import Session

    from .ranks.wire.messages import Layers, Row, Signal
    from .ranks.worker.agent import Agent

#: The ranks the simulation makes outliers (modulo the world size: 9 and 8 of 64).
SLOW = 137
HIGH_NORM = 200
#: Simulator processes ``start`` runs (the ranks split between them).
PROCS = 4
#: What groups one ``start``'s ranks into one job (their ``MASTER_PORT``).
JOB_ENV = "TORCHDBG_SIM_JOB"
SLOW_FACTOR = 6.0
NORM_FACTOR = 8.0
LAYERS = ("embed.weight", "block.0.attn", "block.0.mlp", "block.1.attn", "block.1.mlp", "head")
#: Layers a simulated rank reports unless told (``layers``).
N_LAYERS = len(LAYERS)


def layer_names(count: int) -> list[str]:
    """``count`` layer names: ``LAYERS`` for 6, else a transformer's blocks of 6 (a real
    model at scale has hundreds: what each report carries grows with them)."""
    if count == N_LAYERS:
        return list(LAYERS)
    parts = ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj", "ln_1", "ln_2")
    return [f"model.blocks.{i // 6}.{parts[i % 6]}" for i in range(count)]


class SimWorker:
    """What an agent reads of its worker (agent.WorkerState), for one simulated rank."""

    def __init__(
        self, rank: int, world: int, step_s: float, address: str, key: str, layers: int = N_LAYERS
    ) -> None:
        from .ranks.worker.agreed import Agreements

        self.rank = rank
        self.world = world
        self.address = address
        self.key = key
        self.hang_s = 10.0
        #: A row every so many steps (the kernel's config, as a worker's boundary.py).
        self.row_stride = 1
        self.train_tid: int | None = None
        self.agreed = Agreements(lambda _t, _c: None)
        self.step_s = step_s * (SLOW_FACTOR if rank == SLOW % world else 1.0)
        self.norm_scale = NORM_FACTOR if rank == HIGH_NORM % world else 1.0
        self._rng = random.Random(rank)
        self._names = layer_names(layers)
        self._layout = packed.layout_of(self._names)
        self._rows: deque[Row] = deque()
        self._layers: Layers | None = None
        self._last = time.perf_counter()
        self._next = self._last + self.step_s * self._rng.uniform(0.5, 1.5)

    def advance(self, now: float) -> None:
        """The steps this rank finished by ``now`` (perf_counter)."""
        while now >= self._next:
            self.agreed.step += 1
            step = self.agreed.step
            dt = self._next - self._last
            self._last = self._next
            self._next += self.step_s * self._rng.uniform(0.9, 1.1)
            # all-reduced gradients: every rank has the same norm at a step (but one)
            norm = self.norm_scale * (0.4 + 0.1 * math.sin(step / 7))
            if step % self.row_stride:
                continue  # as a worker's boundary: no row between two of the stride
            self._rows.append(
                {
                    "step": step,
                    "t": time.time(),
                    "dt": dt,
                    "norm": wire.finite_or_special(norm),
                    "mem": 1_000_000 + 1000 * step,
                    "mem_kind": "host",
                }
            )
            self._layers = {
                "step": step,
                "layout": self._layout,
                "names": self._names,
                "packed": packed.pack([norm / (i + 2) for i in range(len(self._names))]),
            }

    def take_rows(self, limit: int) -> list[Row]:
        rows: list[Row] = []
        while self._rows and len(rows) < limit:
            rows.append(self._rows.popleft())
        return rows

    def take_signals(self) -> tuple[list[Signal], int]:
        return [], self.agreed.step

    def take_layers(self) -> Layers | None:
        layers, self._layers = self._layers, None
        return layers

    def since_step(self) -> float | None:
        return time.perf_counter() - self._last


def _as_rank(rank: int, world: int) -> None:
    """The environment a worker of this rank would have (read by ``identity``)."""
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
        MASTER_ADDR="sim", MASTER_PORT=os.environ.get(JOB_ENV) or str(os.getppid()),
    )  # fmt: skip


def run(
    first: int, count: int, world: int, seconds: float, step_s: float = 0.1, layers: int = N_LAYERS
) -> int:
    """Ranks ``first`` .. ``first + count - 1`` of ``world`` for ``seconds``; returns the
    messages sent. One thread drives them all on the agent's 20 ms tick."""
    from .ranks.worker import agent as agent_mod

    address, key = os.environ[wire.ENDPOINT_ENV], os.environ[wire.KEY_ENV]
    sims = []
    for rank in range(first, first + count):
        worker = SimWorker(rank, world, step_s, address, key, layers)
        ctx, sock = wire.connect(address, key)
        sess = wire.session(key)
        agent = agent_mod.Agent(worker)
        _as_rank(rank, world)
        agent._hello(sess, sock)
        sims.append((worker, agent, ctx, sock, sess))
    now = time.monotonic()
    due = {id(a): [now + agent_mod.ROWS_S, now + agent_mod.HEARTBEAT_S, False] for _, a, *_ in sims}
    end = now + seconds
    spread: set[int] = set()
    while time.monotonic() < end:
        time.sleep(agent_mod.TICK_S)
        now, perf = time.monotonic(), time.perf_counter()
        for worker, agent, _, sock, sess in sims:
            worker.advance(perf)
            d = due[id(agent)]
            if now >= d[0]:
                # the first interval of the kernel's cadence at a random phase: real
                # workers start apart, their reports do not reach the kernel in bursts
                first = worker.rank not in spread and agent.rows_s != agent_mod.ROWS_S
                if first:
                    spread.add(worker.rank)
                d[0] = now + agent.rows_s * (worker._rng.random() if first else 1.0)
                if agent._send_rows(sess, sock):
                    d[2] = True
            if now >= d[1]:
                d[1] = now + agent.heartbeat_s
                if not d[2]:
                    agent._send(sess, sock, "heartbeat", agent._heartbeat())
                d[2] = False
            _receive(agent, sess, sock)
    sent = 0
    for _, agent, _ctx, sock, sess in sims:
        agent._send_rows(sess, sock)
        agent._send(sess, sock, "bye", {"state": "exited"})
        sent += sum(agent.sent.values())
    for _, _, ctx, sock, _ in sims:
        sock.close(wire.LINGER_MS)
        ctx.term()
    return sent


def _receive(agent: Agent, sess: Session, sock: zmq.Socket[bytes]) -> None:
    """The kernel's messages (``config``: the cadence it asks for), read by the agent."""
    import zmq

    if sock.poll(0, zmq.POLLIN):
        agent._receive(sess, sock)


def start(
    world: int,
    seconds: float = 30.0,
    step_s: float = 0.1,
    procs: int = PROCS,
    layers: int = N_LAYERS,
) -> list[subprocess.Popen[str]]:
    """From a kernel with the extension loaded (its endpoint in this environment): start
    ``world`` simulated ranks, one job, for ``seconds``, in ``procs`` processes; returns
    them at once (the cell ends; ``wait`` joins them). For the UI tests."""
    if not os.environ.get(wire.ENDPOINT_ENV) or not os.environ.get(wire.KEY_ENV):
        raise RuntimeError("no ranks endpoint here: %load_ext jupyterlab_torchdbg first")
    env = {**os.environ, JOB_ENV: f"{os.getpid()}{time.monotonic_ns() % 10**9}"}
    procs = max(1, min(procs, world))
    share = -(-world // procs)
    children = []
    for first in range(0, world, share):
        count = min(share, world - first)
        cmd = [sys.executable, "-m", "jupyterlab_torchdbg.ranks_sim", str(first), str(count),
               str(world), str(seconds), str(step_s), str(layers)]  # fmt: skip
        children.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    return children


def wait(children: list[subprocess.Popen[str]], timeout: float = 120.0) -> int:
    """Join ``start``'s processes; the messages they sent."""
    return sum(int((c.communicate(timeout=timeout)[0] or "0").strip() or 0) for c in children)


def main(argv: list[str]) -> int:
    first, count, world = int(argv[0]), int(argv[1]), int(argv[2])
    seconds = float(argv[3])
    step_s = float(argv[4]) if len(argv) > 4 else 0.1
    layers = int(argv[5]) if len(argv) > 5 else N_LAYERS
    sent = run(first, count, world, seconds, step_s, layers)
    print(sent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
