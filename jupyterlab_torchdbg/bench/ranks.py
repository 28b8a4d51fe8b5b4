"""The cost of multi-process attachment: 4 gloo ranks on CPU (issue #15).

``python -m jupyterlab_torchdbg.bench --ranks`` (not part of ``--quick`` nor of the
default run: it spawns 2 x ``rounds`` DDP jobs of ``world`` processes).

In this process the kernel side runs as in a kernel (the endpoint, the hub, the
environment that spawned workers inherit); the panel is a counter of ``ranks`` messages.
Each round runs one job attached and one job not attached (the endpoint's variables
removed from the environment, so the workers' boot hook does nothing), in a random
order: the pair's ratio of median step times is the round's figure (paired and
interleaved, so the machine's load drifting between jobs cancels out). Step times are
measured in every rank after warm-up steps; a job's step time is the median over its
ranks' steps. Also reported: messages per second each rank sent to the kernel and
``ranks`` messages per second to the panel while a job ran (limits: 10 and 10).
"""

from __future__ import annotations

import json
import os
import random
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from typing_extensions import TypedDict

if TYPE_CHECKING:
    from ..protocol.json_types import JsonObject
    from ..ranks.kernel.endpoint import OnMessage

WORLD = 4
ROUNDS = 3
WARMUP = 20
STEPS = 150


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, out: str) -> None:
    """One rank: a small MLP under DDP; writes its measured step times."""
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))  # fmt: skip
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    times: list[float] = []
    for i in range(WARMUP + STEPS):
        t0 = time.perf_counter()
        x = torch.randn(64, 64, generator=g)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i >= WARMUP:
            times.append(time.perf_counter() - t0)
    Path(out, f"rank{rank}.json").write_text(json.dumps(times))
    dist.barrier()
    dist.destroy_process_group()


class RanksResult(TypedDict):
    """The ranks section's figures (``run_ranks``)."""

    world: int
    rounds: int
    steps_per_rank: int
    step: str
    ratio_median: float
    ratio_range: list[float]
    step_ms_attached: float
    step_ms_detached: float
    messages_per_s_per_rank_max: float | None
    messages_per_s_per_rank_median: float | None
    ranks_messages_per_s_to_panel_max: float | None
    jobs_seen: int
    refused: int
    errors: list[str]


class _Counter:
    """The hub's broadcast (the panel) and the endpoint's callback, counted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.panel: list[float] = []
        self.worker: dict[bytes, list[float]] = {}

    def broadcast(self, msg: Mapping[str, object]) -> None:
        if msg.get("method") == "ranks":
            with self.lock:
                self.panel.append(time.monotonic())

    def wrap(self, on_message: OnMessage) -> OnMessage:
        def counted(worker: bytes, msg_type: str, content: JsonObject) -> None:
            with self.lock:
                self.worker.setdefault(worker, []).append(time.monotonic())
            on_message(worker, msg_type, content)

        return counted

    def reset(self) -> None:
        with self.lock:
            self.panel.clear()
            self.worker.clear()


def _job(world: int) -> float:
    """One job of ``world`` ranks; its median step time (s)."""
    from torch.multiprocessing.spawn import spawn

    with tempfile.TemporaryDirectory() as out:
        spawn(_worker, args=(world, _free_port(), out), nprocs=world, join=True)
        times = [
            t for r in range(world) for t in json.loads(Path(out, f"rank{r}.json").read_text())
        ]
    return float(statistics.median(times))


def _rate(stamps: list[float]) -> float | None:
    """Messages per second over the span of ``stamps`` (None when too few)."""
    if len(stamps) < 3 or stamps[-1] <= stamps[0]:
        return None
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def run_ranks(rounds: int = ROUNDS, world: int = WORLD, seed: int = 0) -> RanksResult:
    """The ranks section of the bench (see the module docstring)."""
    import torch  # noqa: F401  (spawned workers import it anyway; the parent's patch needs it)

    from ..ranks.kernel.aggregator import RankHub
    from ..ranks.kernel.endpoint import Endpoint
    from ..ranks.kernel.worker_env import install

    counter = _Counter()
    errors: list[str] = []
    hub = RankHub(counter.broadcast, errors.append, "bench")
    endpoint = Endpoint(counter.wrap(hub.on_message))
    hub.endpoint = endpoint
    rng = random.Random(seed)
    ratios: list[float] = []
    attached: list[float] = []
    detached: list[float] = []
    per_rank: list[float] = []
    panel: list[float] = []
    try:
        for _ in range(rounds):
            order = ["attached", "detached"]
            rng.shuffle(order)
            pair: dict[str, float] = {}
            for variant in order:
                undo = install(endpoint.address, endpoint.key) if variant == "attached" else None
                counter.reset()
                try:
                    pair[variant] = _job(world)
                finally:
                    if undo is not None:
                        undo()
                if variant == "attached":
                    time.sleep(0.3)  # the last messages
                    with counter.lock:
                        rates = [_rate(s) for s in counter.worker.values()]
                        panel_rate = _rate(list(counter.panel))
                    per_rank.extend(r for r in rates if r is not None)
                    if panel_rate is not None:
                        panel.append(panel_rate)
            attached.append(pair["attached"])
            detached.append(pair["detached"])
            ratios.append(pair["attached"] / pair["detached"])
    finally:
        hub.close()
        endpoint.close()
    jobs = len(hub.jobs)
    return {
        "world": world,
        "rounds": rounds,
        "steps_per_rank": STEPS,
        "step": "MLP 64-256-256-10, batch 64, DDP gloo, AdamW, 1 thread per rank",
        "ratio_median": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "step_ms_attached": statistics.median(attached) * 1e3,
        "step_ms_detached": statistics.median(detached) * 1e3,
        "messages_per_s_per_rank_max": max(per_rank) if per_rank else None,
        "messages_per_s_per_rank_median": statistics.median(per_rank) if per_rank else None,
        "ranks_messages_per_s_to_panel_max": max(panel) if panel else None,
        "jobs_seen": jobs,
        "refused": endpoint.refused,
        "errors": errors,
    }


def table(r: RanksResult) -> str:
    def f(x: float | None, spec: str = ".2f") -> str:
        return "n/a" if x is None else format(x, spec)

    lo, hi = r["ratio_range"]
    return "\n".join(
        [
            f"### Ranks: {r['world']} gloo ranks on CPU, {r['rounds']} paired rounds",
            "",
            "| figure | value |",
            "|---|---|",
            f"| step time attached / not (median, range) | {f(r['ratio_median'], '.3f')} "
            f"({f(lo, '.3f')} to {f(hi, '.3f')}) |",
            f"| step time attached / not attached (ms) | {f(r['step_ms_attached'])} / "
            f"{f(r['step_ms_detached'])} |",
            f"| messages/s per rank to the kernel (median, max; limit 10) | "
            f"{f(r['messages_per_s_per_rank_median'], '.1f')}, "
            f"{f(r['messages_per_s_per_rank_max'], '.1f')} |",
            f"| `ranks` messages/s to the panel (max; limit 10) | "
            f"{f(r['ranks_messages_per_s_to_panel_max'], '.1f')} |",
            f"| jobs seen by the kernel side / errors | {r['jobs_seen']} / {len(r['errors'])} |",
        ]
    )
