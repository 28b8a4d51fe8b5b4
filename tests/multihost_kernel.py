"""The kernel's side of the multi-host test (tests/test_ranks_multihost.py), run in the
"kernel host" network namespace: what ``%load_ext`` wires for ranks (attach.py), without
a notebook: the endpoint on ``$TORCHDBG_LISTEN`` (TCP), the hub, the worker environment.

It prints one JSON line: ``{"env": ranks_env(), "transport": ...}``, what every host
exports; then answers each line on stdin: ``state`` -> one JSON line with the jobs (their
ranks: number, host, pid, step, ended) and the endpoint's refusals by reason; ``quit``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from jupyterlab_torchdbg.ranks.kernel import worker_env
from jupyterlab_torchdbg.ranks.kernel.aggregator import RankHub
from jupyterlab_torchdbg.ranks.kernel.endpoint import Endpoint
from jupyterlab_torchdbg.ranks.kernel.remote_env import ranks_env


def state(hub: RankHub, ep: Endpoint, errors: list[str]) -> dict[str, Any]:
    with hub.lock:
        jobs = [
            {
                "key": job.key,
                "ended": job.ended,
                "ranks": sorted(
                    (
                        {
                            "rank": r.identity["rank"],
                            "world": r.identity["world_size"],
                            "host": r.identity["host"],
                            "pid": r.identity["pid"],
                            "step": r.step,
                            "ended": r.ended,
                        }
                        for r in job.workers.values()
                    ),
                    key=lambda r: r["rank"],
                ),
            }
            for job in hub.jobs
        ]
    return {
        "jobs": jobs,
        "refusals": dict(ep.refusals),
        "notes": list(ep.notes),
        "errors": errors + [f"{k}:{v}" for k, v in ep.errors.items()],
    }


def main() -> None:
    errors: list[str] = []
    hub = RankHub(lambda message: None, errors.append)
    ep = Endpoint(hub.on_message)
    hub.endpoint = ep
    hub.transport = ep.transport
    undo = worker_env.install(ep.address, ep.key, watch_torch=False, job=ep.job)
    print(json.dumps({"env": dict(ranks_env()), "transport": ep.transport}), flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "state":
                print(json.dumps(state(hub, ep, errors)), flush=True)
            elif line.strip() == "quit":
                break
    finally:
        undo()
        ep.close()
        hub.close()


if __name__ == "__main__":
    main()
