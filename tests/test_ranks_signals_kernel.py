"""Per-rank gradient alarms from a real kernel (issue #22 item 5).

2-rank gloo DDP jobs started with ``torch.multiprocessing.spawn`` from a real ipykernel
(the worker functions of ``ranks_workers.py``):

- ``nan``: rank 1's batch holds a NaN at step 26. The all-reduce gives both ranks NaN
  gradients; the ranks diagnose it from their own kept batches and the kernel raises one
  ``non_finite`` alarm naming rank 1, step 26, the cause (``input``) and the tensor,
  saying rank 0 holds it only through the all-reduce.
- ``spike-local``: each rank trains its own replica; rank 1's targets are 10,000 at step
  26: one ``explosion`` alarm naming rank 1 alone.
- ``spike``: the same under DDP: both ranks read the same exploded norm; one alarm for
  both, saying which rank's batch caused it is not known.

Every comm message is validated against the schema (kernel_client).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernel_client import KernelDriver
from test_ranks_kernel import JOB_S, alarms, last_job, start, summary, wait_ended

BAD_STEP = 26


async def run_job(k: KernelDriver, comm: str, steps: int, mode: str) -> int:
    """Run one 2-rank spawned job to its end; returns its id (its last state is in)."""
    before = last_job(k, comm)
    r = await k.run(f"rw.spawn(2, {steps}, {mode!r})", timeout=JOB_S)
    assert r.ok, r.errors
    await k.pump_until(lambda: last_job(k, comm) > before, timeout=30)
    job = last_job(k, comm)
    await wait_ended(k, comm, job)
    return job


def one(k: KernelDriver, comm: str, job: int, kind: str) -> dict[str, Any]:
    found = alarms(k, comm, job, kind)
    assert len(found) == 1, f"{kind}: {found}\n{summary(k, comm)}"
    return found[0]


async def test_a_nan_in_rank_1s_batch_is_one_alarm_naming_rank_1_and_its_input(
    kernel: KernelDriver, tmp_path: Path
) -> None:
    k = kernel
    comm, _ = await start(k, tmp_path)
    job = await run_job(k, comm, 40, "nan")
    alarm = one(k, comm, job, "non_finite")
    assert (alarm["rank"], alarm["step"], alarm["cause"]) == (1, BAD_STEP, "input")
    assert alarm["ranks"] == [0, 1]
    msg = alarm["message"]
    assert f"Non-finite gradient at step {BAD_STEP}, from rank 1" in msg, msg
    # the tensor of rank 1's batch, with the index of its NaN
    assert "the input batch of model holds NaN: `input` (32x8) at index [3, 0]" in msg, msg
    assert "Rank 0 holds it only through the all-reduce" in msg, msg
    assert "data pipeline" in alarm["remedy"]
    assert "skip_nonfinite" not in alarm["remedy"]  # not a rank's action
    # both ranks read NaN after the all-reduce: that is no desync
    assert not alarms(k, comm, job, "desync")


async def test_an_explosion_is_named_on_its_rank_and_under_ddp_on_every_rank(
    kernel: KernelDriver, tmp_path: Path
) -> None:
    k = kernel
    comm, _ = await start(k, tmp_path)
    # each rank its own replica: only rank 1's gradient explodes
    job = await run_job(k, comm, 40, "spike-local")
    alarm = one(k, comm, job, "explosion")
    assert (alarm["rank"], alarm["step"], alarm["ranks"]) == (1, BAD_STEP, [1])
    assert alarm["message"].startswith(f"Rank 1: Gradient explosion at step {BAD_STEP}")
    assert f"The other ranks' total norms at step {BAD_STEP}: rank 0 " in alarm["message"]
    assert alarm["layer"] in ("model.0", "model.2"), alarm  # named as the kernel names them
    assert alarm["remedy"]

    # under DDP both ranks read the same all-reduced norm: one alarm for both, and no
    # claim about which rank's batch made it
    job = await run_job(k, comm, 40, "spike")
    alarm = one(k, comm, job, "explosion")
    assert (alarm["rank"], alarm["step"], alarm["ranks"]) == (0, BAD_STEP, [0, 1])
    assert "which rank's batch caused it is not known" in alarm["message"]
    assert not alarms(k, comm, job, "desync")
