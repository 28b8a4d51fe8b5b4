"""Worker functions for the real-kernel ranks tests (tests/test_ranks_kernel.py) and the
ranks bench: the test copies this file into its tmp_path and the kernel imports it from
there, so spawned children (which get the parent's ``sys.path``) and a ``torchrun`` script
beside it import it too.

``train(rank, world, port, steps, mode, out)``: a small DDP model on CPU (gloo), each rank
with its own data. ``mode`` makes one rank misbehave: ``raise`` (rank 1 raises at its 4th
step), ``sleep`` (rank 1 sleeps in its own code at its 5th step: a hang), ``straggle``
(rank 1 does 150 ms more own work every step), ``desync`` (rank 1 scales its gradients
after the all-reduce from its 6th step on), ``slow`` (every rank sleeps 20 ms a step, so
an action can be agreed while it runs). ``manual`` / ``manual-slow``: no optimizer, the
weights updated by hand after ``backward()`` (``p -= lr * p.grad``, as the classic
word-language-model example), with keyword arguments to the model's call.
``nan``: rank 1's batch holds a NaN (``x[3, 0]``) at step ``BAD_STEP``; ``spike``: rank
1's targets are 10,000 at that step instead of 0 (its loss and gradient explode);
``spike-local``: the same without DDP (each rank trains its own replica: only rank 1's
gradient explodes).
These three sleep 50 ms a step, as a real step takes far longer than reading its norms
(so every step is sampled, even on a busy machine).
``fsdp``: the model sharded with FSDP2's ``fully_shard`` (no DDP): each rank holds half
of every parameter and its gradient; every step rank 0 writes the global gradient norm
``clip_grad_norm_`` computes (with an infinite bound: nothing is clipped) to
``out/fsdp_norms.json``, the reference the kernel's combined norm is checked against.
``out``: each rank saves its final weights there, and its default group's collective
count (``rankN.seq``). ``hang``: a rank that never enters the collective (see there).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

#: Seconds rank 1 sleeps in ``sleep`` mode (its stack names this line).
SLEEP_S = 9.0
#: Seconds rank 1 sleeps in ``hang`` (far over the tests' hang threshold).
HANG_S = 14.0
#: The step (1-based) at which rank 1's batch is bad in ``nan`` / ``spike`` modes.
BAD_STEP = 26


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        time.sleep(0.005)


def train(
    rank: int, world: int, port: int, steps: int, mode: str = "ok", out: str | None = None
) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    if mode == "fsdp":
        _fsdp(model, rank, world, steps, out)
        return
    ddp = model if mode == "spike-local" else nn.parallel.DistributedDataParallel(model)
    g = torch.Generator().manual_seed(1000 + rank)
    if mode.startswith("manual"):
        _manual(ddp, g, rank, steps, mode == "manual-slow")
        steps = 0
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for i in range(steps):
        x = torch.randn(32, 8, generator=g) * (1 + rank)
        target = 0.0
        if rank == 1 and i == BAD_STEP - 1:
            if mode == "nan":
                x[3, 0] = float("nan")
            elif mode.startswith("spike"):
                target = 1e4  # an outlier target: the loss and its gradient explode
        loss = (ddp(x) - target).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if mode == "desync" and rank == 1 and i >= 5:
            for p in model.parameters():
                p.grad.mul_(1.5)
        if mode == "raise" and rank == 1 and i == 3:
            raise RuntimeError("boom on rank 1")
        if mode == "sleep" and rank == 1 and i == 4:
            time.sleep(SLEEP_S)  # rank 1 hangs here
        if mode == "straggle" and rank == 1:
            _busy(0.15)
        if mode in ("slow", "straggle", "sleep"):
            time.sleep(0.02)
        elif mode in ("nan", "spike", "spike-local"):
            time.sleep(0.05)  # reading the norms stays far under 2% of a step: stride 1
        opt.step()
    if out is not None:
        torch.save(
            {k: v.detach().clone() for k, v in model.state_dict().items()},
            Path(out) / f"rank{rank}.pt",
        )
        _save_collectives(out, rank)
    dist.barrier()
    dist.destroy_process_group()


def _save_collectives(out: str, rank: int) -> None:
    """How many collectives this rank's default group ran (torch's own counter)."""
    import torch.distributed as dist

    seq = dist.distributed_c10d._get_default_group()._get_sequence_number_for_group()
    (Path(out) / f"rank{rank}.seq").write_text(str(seq))


class SlowData:
    """A dataset whose item ``slow_at`` sleeps ``HANG_S`` on rank 1 (``__getitem__`` runs
    on the training thread: no loader workers)."""

    def __init__(self, rank: int, slow_at: int) -> None:
        self.rank, self.slow_at = rank, slow_at

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> Any:
        import torch

        if self.rank == 1 and i == self.slow_at:
            time.sleep(HANG_S)  # rank 1 hangs in its data loading
        return torch.full((8,), float(i + self.rank))


def hang(rank: int, world: int, port: int, mode: str) -> None:
    """A hang for the collective diagnosis (tests/test_ranks_hang_jobs.py). ``loader``:
    each step all-reduces a [1024] float32 tensor by hand; rank 1 sleeps in its dataset's
    ``__getitem__`` at step 6 while the others enter that all-reduce. ``ddp``: rank 1
    sleeps after its forward at step 6, before backward, while the others are in
    backward, in DDP's gradient all-reduce."""
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model: nn.Module = nn.Linear(8, 1024)
    if mode == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(SlowData(rank, 5 * 4), batch_size=4)
    for i, x in enumerate(loader):
        out = model(x)
        if mode == "ddp" and rank == 1 and i == 5:
            time.sleep(HANG_S)  # rank 1 hangs before backward
        out.pow(2).mean().backward()
        if mode == "loader":
            t = torch.ones(1024)
            dist.all_reduce(t)  # the collective the others wait in
        time.sleep(0.02)
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


def spawn_hang(world: int, mode: str) -> Any:
    """Start ``hang`` on ``world`` ranks (not joined: the caller joins)."""
    import torch.multiprocessing as mp

    return mp.start_processes(
        hang, args=(world, free_port(), mode), nprocs=world, join=False, start_method="spawn"
    )


def _manual(ddp: Any, g: Any, rank: int, steps: int, slow: bool) -> None:
    """A DDP loop without an optimizer: the weights updated by hand."""
    import torch

    for _ in range(steps):
        x = torch.randn(32, 8, generator=g) * (1 + rank)
        loss = ddp(input=x).pow(2).mean()
        ddp.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in ddp.parameters():
                p -= 0.05 * p.grad
        if slow:
            time.sleep(0.02)


def _fsdp(model: Any, rank: int, world: int, steps: int, out: str | None) -> None:
    """FSDP2 on CPU (gloo): the reference global norm of every step, from torch."""
    import json

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    g = torch.Generator().manual_seed(1000 + rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    reference: dict[int, float] = {}
    for i in range(steps):
        x = torch.randn(32, 8, generator=g) * (1 + rank)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        full = total.full_tensor() if hasattr(total, "full_tensor") else total
        reference[i + 1] = float(full)
        time.sleep(0.05)
        opt.step()
    if rank == 0 and out is not None:
        (Path(out) / "fsdp_norms.json").write_text(json.dumps(reference))
    dist.barrier()
    dist.destroy_process_group()


def same_weights(out: str, world: int) -> bool:
    """Every rank saved bit-identical weights."""
    import torch

    states = [torch.load(Path(out) / f"rank{r}.pt") for r in range(world)]
    return all(all(torch.equal(states[0][k], s[k]) for k in states[0]) for s in states[1:])


def spawn(world: int, steps: int, mode: str = "ok", out: str | None = None) -> None:
    """``torch.multiprocessing.spawn`` from the notebook."""
    import torch.multiprocessing as mp

    mp.spawn(train, args=(world, free_port(), steps, mode, out), nprocs=world, join=True)


def fork(world: int, steps: int) -> None:
    """A fork launcher, as accelerate's ``notebook_launcher`` does."""
    import torch.multiprocessing as mp

    ctx = mp.start_processes(
        train, args=(world, free_port(), steps), nprocs=world, join=True, start_method="fork"
    )
    del ctx


if __name__ == "__main__":  # torchrun --nproc_per_node N ranks_workers.py STEPS
    import torch.distributed as dist

    dist.init_process_group("gloo")
    train(dist.get_rank(), dist.get_world_size(), int(os.environ["MASTER_PORT"]), int(sys.argv[1]))
