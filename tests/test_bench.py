"""``python -m jupyterlab_torchdbg.bench --quick --json``: runs, and its JSON has the agreed shape.

Timings are not asserted (a shared 2-core machine is too noisy for that; the benchmark
itself is how speed is checked). Only shape and sanity: every model and variant present,
ratios positive and finite, intervals around their medians, streaming without gaps.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

RATIO_KEYS = {
    "loaded_idle",
    "monitor_every_step",
    "monitor_default",
    "naive_loop",
    "total_norm",
    "detect_anomaly",
}
MODELS = {"mlp_4x1024", "cnn_small", "linear_200x64", "transformer_small"}


def test_quick_benchmark_json_shape(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyterlab_torchdbg.bench",
            "--quick",
            "--rounds",
            "4",
            "--warmup",
            "1",
            "--stream-seconds",
            "0.3",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| step-time ratio to no monitoring |" in proc.stdout
    data = json.loads(out.read_text())
    assert set(data["models"]) == MODELS
    for name, m in data["models"].items():
        assert set(m["ratios"]) == RATIO_KEYS, name
        for key, v in m["ratios"].items():
            lo, hi = m["ci95"][key]
            assert math.isfinite(v) and v > 0, (name, key)
            assert lo <= v <= hi, (name, key)
        # detect_anomaly is far slower than anything else: the pairing is not mixed up
        assert m["ratios"]["detect_anomaly"] > 1.2
        assert m["monitor_cost_vs_total_norm"] > 0
        assert m["monitor_default"]["stride"] >= 1
        assert m["tensors"] > 0 and m["step_ms"] > 0
    assert data["models"]["linear_200x64"]["tensors"] == 100  # quick size
    s = data["streaming"]
    assert {"points_per_s", "messages_per_s", "sequence_gaps"} <= set(s)
    assert s["sequence_gaps"] == 0
    assert s["points_delivered"] == s["points_recorded"] > 0
    assert 0 < s["messages_per_s"] <= 11
    assert data["meta"]["quick"] is True and data["meta"]["tool_errors"] == {}
    assert isinstance(data["targets"], dict)


def test_bench_rejects_unknown_models() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "jupyterlab_torchdbg.bench", "--quick", "--models", "resnet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "unknown model" in proc.stdout
