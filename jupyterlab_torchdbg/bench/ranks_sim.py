"""The kernel's cost with hundreds of ranks: simulated workers (issue #25).

``python -m jupyterlab_torchdbg.bench --ranks-sim 64,256 [--ranks-sim-seconds 20]``.

In this process the kernel side runs as in a kernel (the endpoint's thread, the hub and
its flush thread); the panel is a function that encodes each broadcast as the comm
would (JSON) and counts it. The ranks are simulated in ``PROCS`` subprocesses
(``jupyterlab_torchdbg.ranks_sim``: real sockets, real signed messages built by the
worker's agent, at its cadence), so this process's CPU time is the kernel side's alone:
the figure is its CPU time (``resource``: every thread of the process) over a window
after every rank said hello, divided by the window's wall time.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import threading
import time
from collections.abc import Mapping

from typing_extensions import TypedDict

from .. import ranks_sim as sim
from ..ranks.wire import transport as wire

#: Simulator processes (ranks split between them).
PROCS = 4
SECONDS = 20.0
#: Seconds after the start not measured (connections, hellos, the first rows).
SETTLE_S = 3.0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _threads() -> dict[str, float]:
    """CPU seconds of each thread of this process by name (Linux ``/proc``; else {}):
    Python's own names for its threads, the OS's for the others (zmq's I/O thread).
    Python's threads are read from their CPU clocks (nanoseconds), the others from
    ``/proc`` (in clock ticks, 10 ms: a thread's figure moves by 0.0005 per tick)."""
    names = {str(t.native_id): t.name for t in threading.enumerate()}
    clocks: dict[str, float] = {}
    for t in threading.enumerate():
        try:
            if t.ident is not None:
                clocks[str(t.native_id)] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (AttributeError, OSError, ValueError):
            pass
    out: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
        tick = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        name = names.get(tid, comm)
        used = clocks.get(tid, (int(fields[11]) + int(fields[12])) / tick)
        out[name] = out.get(name, 0.0) + used
    return out


class SimWorld(TypedDict):
    """One simulated job's figures (``run_one``)."""

    world: int
    seconds: float
    measured_s: float
    simulator_processes: int
    step_s: float
    kernel_cpu_fraction: float
    kernel_cpu_fraction_by_thread: dict[str, float]
    worker_messages_per_s: float
    worker_messages_sent: int
    worker_messages_received: int
    ranks_messages_per_s_to_panel: float
    ranks_message_bytes_max: int | None
    ranks_message_bytes_median: int | None
    ranks_seen: int
    ranks_in_last_message: int
    refused: int
    errors: list[str]


class SimResult(TypedDict):
    """The simulated-ranks section: each world size's job, by ``str(world)``."""

    seconds: float
    layers: int
    worlds: dict[str, SimWorld]


class _Panel:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sizes: list[int] = []
        self.stamps: list[float] = []
        self.last: Mapping[str, object] | None = None

    def broadcast(self, msg: Mapping[str, object]) -> None:
        size = len(json.dumps(msg, separators=(",", ":")))
        if msg.get("method") == "ranks":
            with self.lock:
                self.sizes.append(size)
                self.stamps.append(time.monotonic())
                self.last = msg


#: Each simulated rank's step time (s): 10 steps a second, a norm read at every one.
STEP_S = 0.1
#: Layers each simulated rank reports (``--ranks-sim-layers``).
LAYERS = sim.N_LAYERS


def run_one(
    world: int,
    seconds: float = SECONDS,
    procs: int = PROCS,
    step_s: float = STEP_S,
    layers: int = LAYERS,
) -> SimWorld:
    """One simulated job of ``world`` ranks (see the module docstring)."""
    from ..ranks.kernel.aggregator import RankHub
    from ..ranks.kernel.endpoint import Endpoint

    panel = _Panel()
    errors: list[str] = []
    hub = RankHub(panel.broadcast, errors.append, "bench")
    endpoint = Endpoint(hub.on_message)
    hub.endpoint = endpoint
    children: list[subprocess.Popen[str]] = []
    undo = {
        wire.ENDPOINT_ENV: os.environ.get(wire.ENDPOINT_ENV),
        wire.KEY_ENV: os.environ.get(wire.KEY_ENV),
    }
    os.environ[wire.ENDPOINT_ENV], os.environ[wire.KEY_ENV] = endpoint.address, endpoint.key
    try:
        children = sim.start(world, seconds, step_s, procs, layers)
        settle = min(SETTLE_S, seconds / 4)
        deadline = time.monotonic() + seconds
        time.sleep(settle)
        threads0 = _threads()
        received0, cpu0, wall0 = endpoint.received, _cpu(), time.monotonic()
        with panel.lock:
            n0 = len(panel.sizes)
        time.sleep(max(0.5, deadline - 0.5 - time.monotonic()))
        received1, cpu1, wall1 = endpoint.received, _cpu(), time.monotonic()
        threads1 = _threads()
        with panel.lock:
            sizes = panel.sizes[n0:]
            last = panel.last
        sent = sim.wait(children, timeout=seconds + 60)
        time.sleep(0.3)
    finally:
        for name, value in undo.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for child in children:
            if child.poll() is None:
                child.kill()
        hub.close()
        endpoint.close()
    wall = wall1 - wall0
    ranks = (last or {}).get("ranks") or []
    in_last = len(ranks) if isinstance(ranks, list) else 0  # (the panel's: a list)
    return {
        "world": world,
        "seconds": seconds,
        "measured_s": round(wall, 3),
        "simulator_processes": len(children),
        "step_s": step_s,
        "kernel_cpu_fraction": (cpu1 - cpu0) / wall,
        # where it goes: the endpoint's thread (verify, rows), the flusher (clock checks,
        # the ranks messages), zmq's I/O thread
        "kernel_cpu_fraction_by_thread": {
            name: round((t - threads0.get(name, 0.0)) / wall, 5)
            for name, t in sorted(threads1.items())
            if t > threads0.get(name, 0.0)
        },
        "worker_messages_per_s": (received1 - received0) / wall,
        "worker_messages_sent": sent,
        "worker_messages_received": endpoint.received,
        "ranks_messages_per_s_to_panel": len(sizes) / wall,
        "ranks_message_bytes_max": max(sizes) if sizes else None,
        "ranks_message_bytes_median": sorted(sizes)[len(sizes) // 2] if sizes else None,
        "ranks_seen": len(hub.jobs[-1].ranks) if hub.jobs else 0,
        "ranks_in_last_message": in_last,
        "refused": endpoint.refused,
        "errors": errors,
    }


def run_ranks_sim(worlds: list[int], seconds: float = SECONDS, layers: int = LAYERS) -> SimResult:
    return {
        "seconds": seconds,
        "layers": layers,
        "worlds": {str(w): run_one(w, seconds, layers=layers) for w in worlds},
    }


def targets(r: SimResult) -> dict[str, object]:
    out: dict[str, object] = {}
    at = r["worlds"].get("256")
    if at is not None:
        out["ranks_sim.kernel_cpu_fraction<=0.01"] = at["kernel_cpu_fraction"] <= 0.01
    return out


def table(r: SimResult) -> str:
    lines = [
        f"### Simulated ranks: kernel side's CPU, {r['seconds']:.0f} s per world, "
        f"{r['layers']} layers a rank",
        "",
        "| ranks | kernel CPU / wall | worker msgs/s | `ranks` msgs/s to panel | "
        "`ranks` msg bytes (median, max) | errors |",
        "|---|---|---|---|---|---|",
    ]
    for w in r["worlds"].values():
        lines.append(
            f"| {w['world']} | {w['kernel_cpu_fraction']:.4f} | "
            f"{w['worker_messages_per_s']:.0f} | {w['ranks_messages_per_s_to_panel']:.1f} | "
            f"{w['ranks_message_bytes_median']}, {w['ranks_message_bytes_max']} | "
            f"{len(w['errors'])} |"
        )
    return "\n".join(lines)
