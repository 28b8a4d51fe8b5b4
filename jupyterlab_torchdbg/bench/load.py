"""Load section: what ``%load_ext jupyterlab_torchdbg`` costs a user, torch already imported.

Each measurement is a fresh Python process (cold imports of the extension's modules, as in
a new kernel) with IPython's ``InteractiveShell``, torch and ipykernel (with jupyter_client,
zmq and comm, which a kernel process has imported already) imported first; it times
``%load_ext`` itself, then a second ``%reload_ext`` (warm imports: the unload and load
work alone). Reports the median over ``runs`` processes.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

from typing_extensions import TypedDict

_PROBE = """
import json, time
import torch  # the user imported torch before loading
import ipykernel.ipkernel  # noqa: F401  (what a kernel process has imported already)
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
t = time.perf_counter()
shell.run_line_magic("load_ext", "jupyterlab_torchdbg")
cold = time.perf_counter() - t
t = time.perf_counter()
shell.run_line_magic("reload_ext", "jupyterlab_torchdbg")
warm = time.perf_counter() - t
shell.run_line_magic("unload_ext", "jupyterlab_torchdbg")
print(json.dumps({"cold_ms": cold * 1e3, "reload_ms": warm * 1e3}))
"""


class Load(TypedDict, total=False):
    """``%load_ext``'s cost in fresh processes (``run_load``), or the probe's ``error``."""

    error: str
    runs: int
    load_ext_ms_median: float
    load_ext_ms_each: list[float]
    reload_ext_ms_median: float


def run_load(runs: int = 3) -> Load:
    cold: list[float] = []
    reload: list[float] = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120
        )
        if out.returncode != 0:
            return {"error": out.stderr[-2000:]}
        line = out.stdout.strip().splitlines()[-1]
        d = json.loads(line)
        cold.append(float(d["cold_ms"]))
        reload.append(float(d["reload_ms"]))
    return {
        "runs": runs,
        "load_ext_ms_median": statistics.median(cold),
        "load_ext_ms_each": cold,
        "reload_ext_ms_median": statistics.median(reload),
    }


def summary(s: Load) -> str:
    if "error" in s:
        return f"%load_ext: could not be measured ({s['error']})"
    return (
        f"%load_ext jupyterlab_torchdbg with torch imported: {s['load_ext_ms_median']:.0f} ms "
        f"(median of {s['runs']} fresh processes), %reload_ext {s['reload_ext_ms_median']:.0f} ms."
    )
