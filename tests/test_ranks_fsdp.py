"""FSDP's sharded gradients from a real kernel (issue #25 part 5).

A 2-rank job started with ``torch.multiprocessing.spawn`` shards its model with FSDP2's
``fully_shard`` on CPU (gloo, a 1-D device mesh): every parameter's gradient is a
``DTensor`` of which each rank holds half. The workers read their own shards (no
collective of ours); the kernel combines the two ranks' shard norms of one step into the
job's global gradient norm. Checked against torch: every step rank 0 wrote the norm
``clip_grad_norm_`` computes over the whole sharded model (``ranks_workers._fsdp``).
Also: the ranks are marked ``sharded``, their shard norms differ (no false desync alarm),
and an all-rank clip is refused with its reason (it would need a collective).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from kernel_client import KernelDriver
from test_ranks_kernel import JOB_S, latest, norms, start, summary, wait_ended, while_running

from jupyterlab_torchdbg.ranks.kernel.job import Job

STEPS = 60


def _global(k: KernelDriver, comm: str, job: int) -> dict[int, object]:
    """global step -> the combined norm, from every ``ranks`` message of the job."""
    out: dict[int, object] = {}
    for m in k.messages("ranks", comm):
        j = m.data["job"]
        if j is not None and j["id"] == job and j.get("sharded"):
            s = j["sharded"]
            if s["global_step"] is not None:
                out[s["global_step"]] = s["global_norm"]
    return out


async def test_fsdp_global_norm_is_combined_from_the_shards_and_equals_torchs(
    kernel: KernelDriver, tmp_path: Path
) -> None:
    k = kernel
    comm, sub = await start(k, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    mid = k.start_execute(f"rw.spawn(2, {STEPS}, 'fsdp', {str(out)!r})")

    def sharded_running() -> bool:
        msgs = [m.data for m in k.messages("ranks", comm) if m.data["job"] is not None]
        if not msgs:
            return False
        last = msgs[-1]
        return (
            last["job"].get("sharded") is not None
            and len(last["ranks"]) == 2
            and all(r["step"] >= 5 for r in last["ranks"])
        )

    await while_running(k, comm, mid, sharded_running)
    job = int(k.messages("ranks", comm)[-1].data["job"]["id"])
    # a clip on every rank would need the global norm on each of them: refused, said why
    reply = await k.action(comm, "ranks_clip", {"max_norm": 1.0}, subshell_id=sub)
    assert reply["method"] == "error", reply
    assert "sharded (FSDP)" in reply["message"], reply
    r = await k.wait_execute(mid, JOB_S)
    assert r.ok, r.errors
    await wait_ended(k, comm, job)
    final = latest(k, comm, job)
    assert final is not None
    assert [(s["state"], s["step"], s.get("sharded")) for s in final["ranks"]] == [
        ("exited", STEPS, True),
        ("exited", STEPS, True),
    ], summary(k, comm)
    assert final["job"]["sharded"]["replicas"] == 1

    reference = {int(s): v for s, v in json.loads((out / "fsdp_norms.json").read_text()).items()}
    combined = _global(k, comm, job)
    assert len(combined) >= 5, combined
    for step, value in combined.items():
        assert value == pytest.approx(reference[step], rel=1e-5), (step, value, reference[step])
    # the global norm moved with training (a live figure, not one value repeated)
    assert len({round(float(v), 6) for v in combined.values()}) >= 3  # type: ignore[arg-type]

    # each rank's own norms are its shards': they differ, and no desync is raised for it
    by_rank = norms(k, comm, job)
    common = sorted(set(by_rank[0]) & set(by_rank[1]))
    assert common
    assert any(by_rank[0][s] != pytest.approx(by_rank[1][s], rel=1e-3) for s in common)
    for s in common:
        if s in reference:
            shards = (by_rank[0][s] ** 2 + by_rank[1][s] ** 2) ** 0.5
            assert shards == pytest.approx(reference[s], rel=1e-5)
    kinds = [a["kind"] for a in final["alarms"]]
    assert "desync" not in kinds and "action" not in kinds, final["alarms"]


def _job(world: int, rows: dict[int, list[tuple[int, float]]], replicas: int) -> Job:
    job = Job(id=1, key="k", started=0.0)
    for number, steps in rows.items():
        identity = {"rank": number, "world_size": world, "pid": 100 + number}
        rank = job.add(bytes([number]), identity, now=0.0)
        rank.add_rows(
            {
                "rows": [
                    {"step": s, "dt": 0.01, "norm": n, "replicas": replicas} for s, n in steps
                ],
                "own": 0.5,
            },
            now=1.0,
        )
    return job


def test_hsdp_shards_held_by_two_ranks_count_once_at_the_latest_step_every_rank_read() -> None:
    # a 2x2 mesh (replicate x shard): ranks 0 and 2 hold shard a, ranks 1 and 3 shard b
    a, b = 0.3, 0.4
    job = _job(
        4,
        {
            0: [(1, a), (2, 2 * a), (3, 3 * a)],
            1: [(1, b), (2, 2 * b), (3, 3 * b)],
            2: [(1, a), (2, 2 * a), (3, 3 * a)],
            3: [(1, b), (2, 2 * b)],  # has not read step 3 yet
        },
        replicas=2,
    )
    found = job.global_norm()
    assert found is not None
    step, norm = found
    assert step == 2 and norm == pytest.approx(2 * math.hypot(a, b))
    sharded = job.to_json()["sharded"]
    assert sharded == {"replicas": 2, "global_norm": norm, "global_step": 2}
    assert all(r["sharded"] for r in job.states(1.0, 10.0))


def test_no_global_norm_before_every_rank_of_the_world_attached_nor_for_whole_gradients() -> None:
    assert _job(2, {0: [(1, 0.3)]}, replicas=1).global_norm() is None  # rank 1 not here
    whole = Job(id=1, key="k", started=0.0)
    for n in (0, 1):
        r = whole.add(bytes([n]), {"rank": n, "world_size": 2, "pid": n}, now=0.0)
        r.add_rows({"rows": [{"step": 1, "dt": 0.01, "norm": 0.5}]}, now=1.0)
    assert not whole.sharded() and whole.global_norm() is None
    assert "sharded" not in whole.to_json()
    # a NaN shard makes the global norm NaN (as torch's total would be)
    nan = _job(2, {0: [(1, 0.3)], 1: [(1, float("nan"))]}, replicas=1).global_norm()
    assert nan == (1, "NaN")
