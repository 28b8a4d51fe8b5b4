"""Simulated ranks driven from a real kernel (issue #25), as the UI test drives them.

A real ipykernel with ``%load_ext jupyterlab_torchdbg`` runs ``ranks_sim.start(24, ...)``:
processes that connect to this kernel's endpoint with the key its environment holds and
send the worker's own signed messages. The panel's comm gets ``ranks`` messages with
every rank (compact above 16 ranks: each rank's newest point, its identity once: a
second comm's replay has them all), the slow rank (137 % 24) the
slowest and the high-norm rank (200 % 24) the highest; the job ends when they say bye.
"""

from __future__ import annotations

from typing import Any

from kernel_client import KernelDriver
from test_ranks_kernel import ranks_msgs, summary

WORLD = 24


async def test_simulated_ranks_attach_to_a_real_kernel(kernel: KernelDriver) -> None:
    k = kernel
    await k.run("%load_ext jupyterlab_torchdbg\nfrom jupyterlab_torchdbg import ranks_sim")
    sub = await k.create_subshell()
    comm = await k.open_comm(subshell_id=sub)
    r = await k.run(f"sim = ranks_sim.start({WORLD}, seconds=8)\nprint(len(sim))")
    assert r.stdout.strip() == "4", r

    def stepping() -> dict[str, Any] | None:
        for m in reversed(ranks_msgs(k, comm)):
            states = m["ranks"]
            if len(states) == WORLD and all(s["step_time_s"] and s["grad_norm"] for s in states):
                return m
        return None

    try:
        await k.pump_until(lambda: stepping() is not None, timeout=60)
    except TimeoutError:
        raise AssertionError(summary(k, comm)) from None
    msg = stepping()
    assert msg is not None
    states = {s["rank"]: s for s in msg["ranks"]}
    assert sorted(states) == list(range(WORLD))
    slowest = max(states.values(), key=lambda s: s["step_time_s"])
    highest = max(states.values(), key=lambda s: s["grad_norm"])
    assert slowest["rank"] == 137 % WORLD
    assert highest["rank"] == 200 % WORLD
    # protocol 2.8: each rank's identity reached this panel (its replay or a broadcast),
    # and the broadcasts after it leave it out
    told: dict[int, dict[str, Any]] = {}
    for m in ranks_msgs(k, comm):
        for s in m["ranks"]:
            if "identity" in s:
                assert s["identity"]["rank"] == s["rank"]
                told[s["rank"]] = s["identity"]
    assert sorted(told) == list(range(WORLD))
    assert all(t["host"] and t["pid"] > 0 for t in told.values())
    assert all("identity" not in s for s in msg["ranks"]), msg["ranks"][0]
    # a second panel (or this one reloaded) gets every rank's identity at once
    again = await k.open_comm(subshell_id=sub)
    await k.pump_until(lambda: any(m["replay"] for m in ranks_msgs(k, again)), timeout=30)
    replay = next(m for m in ranks_msgs(k, again) if m["replay"])
    assert sorted(s["identity"]["rank"] for s in replay["ranks"]) == list(range(WORLD))
    assert {s["rank"]: s["identity"] for s in replay["ranks"]} == told
    r = await k.run("print(ranks_sim.wait(sim))", timeout=60)
    assert int(r.stdout.strip()) > WORLD, r
    job = msg["job"]["id"]
    await k.pump_until(
        lambda: any(
            m["job"]["id"] == job and m["job"]["state"] == "ended" for m in ranks_msgs(k, comm)
        ),
        timeout=30,
    )
    errors = await k.value(
        "dict(__import__('jupyterlab_torchdbg.kernel.extension', "
        "fromlist=['current']).current().errors)"
    )
    assert errors == "{}"
