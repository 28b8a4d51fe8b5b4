"""Capture cost with 10,000 locals: a benchmark to run by hand, not a timed test.

    python tests/bench_exceptions_capture.py

Measures ``capture()`` for a failure in (a) a function frame with 10,000 locals and (b) a
notebook-like module namespace with 10,000 globals (a quarter each ints, strings, small
tensors and plain objects). The budget from the issue is 50 ms.
"""

from __future__ import annotations

import importlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from jupyterlab_torchdbg.kernel.exceptions.capture import capture

N = 10_000


def _value_source(i: int) -> str:
    return [str(i), f"'s{i}'", "torch.zeros(4)", "object()"][i % 4]


def measure(fail: Callable[[], None], label: str, repeats: int = 9) -> None:
    times = []
    msg: dict = {}
    for _ in range(repeats):
        try:
            fail()
        except RuntimeError as e:
            t0 = time.perf_counter()
            msg = capture(e)
            times.append((time.perf_counter() - t0) * 1e3)
    frame = msg["frames"][-1]
    print(
        f"{label}: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms "
        f"(first run includes reading the source file); locals_total={frame['locals_total']}, "
        f"rows sent={len(frame['locals'])}"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        body = "\n".join(f"    v{i} = {_value_source(i)}" for i in range(N))
        src = f"import torch\n\ndef f():\n{body}\n    raise RuntimeError('boom')\n"
        Path(d, "many_locals_bench.py").write_text(src)
        sys.path.insert(0, d)
        mod = importlib.import_module("many_locals_bench")
        measure(mod.f, f"function frame, {N:,} locals")

        ns: dict = {"torch": torch}
        for i in range(N):
            ns[f"g{i}"] = [i, f"s{i}", torch.zeros(4), object()][i % 4]
        code = compile("raise RuntimeError('boom')", str(Path(d, "cell.py")), "exec")
        measure(lambda: exec(code, ns), f"module namespace, {N:,} globals")


if __name__ == "__main__":
    main()
