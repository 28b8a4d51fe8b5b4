"""Features section: the run store and leak tracking, each against the same extension
without them (issue #24: "cost nothing measurable per step").

Both are switched by the environment when the extension loads: the run store is on when
``JPY_SESSION_NAME`` is set and ``TORCHDBG_RECORD_DIR`` names a directory (here a
temporary one), leak tracking is on unless ``TORCHDBG_LEAK=0``. Only one extension can
be loaded at a time, so the three arms cannot share a round the way the variants do
(paired.py). Instead each segment loads the extension once per arm, in a freshly
shuffled order:

- ``off``: ``TORCHDBG_LEAK=0``, no store (the reference);
- ``leak_tracking``: the default (``TORCHDBG_LEAK`` unset), no store;
- ``record_store``: the store on, ``TORCHDBG_LEAK=0``.

In each load the default extension monitors a copy of the same model (``watch(model,
opt)``, the ``monitor_default`` variant) for the auto stride's every-step warm-up
(``WARMUP_STEPS``, untimed, as in a long run; then a garbage collection), then times
``windows`` windows of ``steps`` consecutive steps; a window spans at least the
section's shortest window (several flush intervals, ``FULL`` / ``QUICK``), so work done
per flush rather than per step is in it. The ``i``-th window of
an arm is paired with the ``i``-th of ``off`` in the same segment; the ratios are the
medians of those pairs with a 95% bootstrap interval (PERFORMANCE.md: each ≤ 1.02).
Then the cell ends (whatever the features do at a cell's end is not per-step cost).
"""

from __future__ import annotations

import gc
import math
import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from typing_extensions import TypedDict

from ..kernel.grads.stride import WARMUP_STEPS
from ..testing import loaded_extension
from .models import Workload
from .paired import median_ci, paired_ratios
from .variants import Runner

ARMS = ("off", "leak_tracking", "record_store")
#: The environment the arms set (everything else of the process's is left as it is).
ENV_KEYS = ("TORCHDBG_LEAK", "JPY_SESSION_NAME", "TORCHDBG_RECORD_DIR")
#: (segments, windows per arm per segment, shortest window in seconds)
FULL = (8, 4, 0.3)
QUICK = (3, 2, 0.05)


def arm_env(arm: str, store_dir: str) -> dict[str, str]:
    """The environment variables of ``arm`` (the others of ``ENV_KEYS`` are unset)."""
    if arm == "leak_tracking":
        return {}
    env = {"TORCHDBG_LEAK": "0"}
    if arm == "record_store":
        env["JPY_SESSION_NAME"] = os.path.join(store_dir, "bench.ipynb")
        env["TORCHDBG_RECORD_DIR"] = store_dir
    return env


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``ENV_KEYS`` set to ``values`` (absent ones unset), restored afterwards."""
    saved = {k: os.environ.get(k) for k in ENV_KEYS}
    for k in ENV_KEYS:
        os.environ.pop(k, None)
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Features(TypedDict):
    """The record store / leak tracking section's figures (``run_features``)."""

    model: str
    segments: int
    windows_per_segment: int
    steps_per_window: int
    primed_steps: int
    step_ms: dict[str, float]
    window_ms: dict[str, list[float]]
    ratios: dict[str, float]
    ci95: dict[str, list[float]]
    store_state: dict[str, str | None]
    tool_errors: dict[str, int]


def run_features(work: Workload, device: torch.device, quick: bool, seed: int = 0) -> Features:
    segments, windows, min_window_s = QUICK if quick else FULL
    rng = random.Random(seed)
    times: dict[str, list[float]] = {a: [] for a in ARMS}
    steps = 0
    errors: dict[str, int] = {}
    #: each arm's run store as the extension saw it (``on`` / ``off`` / ``unavailable``)
    store: dict[str, str | None] = {}
    with tempfile.TemporaryDirectory(prefix="torchdbg-bench-store-") as store_dir:
        for _ in range(segments):
            order = list(ARMS)
            rng.shuffle(order)
            for arm in order:
                with environment(arm_env(arm, store_dir)), loaded_extension() as loaded:
                    runner = Runner("monitor_default", work, device)
                    t0 = time.perf_counter()
                    for _ in range(WARMUP_STEPS):
                        runner.step()
                    if not steps:  # fixed once, from the first warm-up: same for every arm
                        step_s = (time.perf_counter() - t0) / WARMUP_STEPS
                        steps = max(3, math.ceil(min_window_s / max(step_s, 1e-9)))
                    gc.collect()  # the earlier loads' model copies: not in a window
                    for _ in range(windows):
                        t0 = time.perf_counter()
                        for _ in range(steps):
                            runner.step()
                        times[arm].append((time.perf_counter() - t0) / steps)
                    runner.close()
                    loaded.end_cell()
                    record = getattr(loaded.ext, "record", None)
                    store[arm] = getattr(record, "state", None)
                    for site, n in loaded.ext.errors.items():
                        errors[site] = errors.get(site, 0) + n
    out: Features = {
        "model": work.name,
        "segments": segments,
        "windows_per_segment": windows,
        "steps_per_window": steps,
        "primed_steps": WARMUP_STEPS,
        "step_ms": {a: statistics.median(ts) * 1e3 for a, ts in times.items()},
        #: every window's time per step (ms), in order: window i of an arm pairs with
        #: window i of ``off``
        "window_ms": {a: [t * 1e3 for t in ts] for a, ts in times.items()},
        "ratios": {},
        "ci95": {},
        "store_state": store,
        "tool_errors": errors,
    }
    for arm, rs in paired_ratios(times, base="off").items():
        point, lo, hi = median_ci(rs, rng)
        out["ratios"][arm] = point
        out["ci95"][arm] = [lo, hi]
    return out


def summary(f: Features) -> str:
    """The section in one line (the table's footer)."""

    def cell(arm: str) -> str:
        v, (lo, hi) = f["ratios"][arm], f["ci95"][arm]
        return f"{v:.3f} [{lo:.3f}, {hi:.3f}]"

    return (
        f"Record store and leak tracking ({f['model']}, default monitoring, step-time ratio "
        f"to both off): record store {cell('record_store')}, leak tracking "
        f"{cell('leak_tracking')} ({f['segments']} x {f['windows_per_segment']} windows of "
        f"{f['steps_per_window']} steps; {f['step_ms']['off']:.2f} ms a step with both off)."
    )
