"""``python -m jupyterlab_torchdbg.bench --quick --json``: runs, and its JSON has the agreed shape.

Timings are not asserted (a shared 2-core machine is too noisy for that; the benchmark
itself is how speed is checked). Only shape and sanity: every model and variant present,
ratios positive and finite, intervals around their medians, streaming without gaps and
with every block decodable through the panel's name table.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from jupyterlab_torchdbg.kernel.grads.stride import WARMUP_STEPS, every, nice_at_least

RATIO_KEYS = {
    "loaded_idle",
    "monitor_every_step",
    "monitor_default",
    "naive_loop",
    "total_norm",
    "detect_anomaly",
    "monitor_clip",
    "clip_grad_norm",
    "monitor_clip_vs_clip",
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
    assert "| monitor + clip action ÷ `clip_grad_norm_` |" in proc.stdout
    assert "Default sampling after the warm-up" in proc.stdout
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
        # measured after the auto mode's every-step warm-up, as in a long run
        d = m["monitor_default"]
        assert d["every_step_now"] is False
        # the stride and what it was chosen from: the read alone, against the step time
        assert d["read_cost_s"] > 0 and d["step_time_s"] > 0 and d["budget"] == 0.01
        assert d["implied_stride"] == nice_at_least(
            d["read_cost_s"] / (d["budget"] * d["step_time_s"])
        )
        assert d["stride_reason"].startswith(every(d["stride"]))
        # each target is the check its name says, on the figures in the same JSON
        within = 0.5 <= d["stride"] / d["implied_stride"] <= 2
        assert data["targets"][f"{name}.default_stride_within_2x_of_read"] is within
        # periodic work (flush, alarms, status) is measured apart, with its flush interval
        assert m["monitor_periodic_us"] > 0 and m["flush_interval_s"] > 0
        assert m["tensors"] > 0 and m["step_ms"] > 0
        # monitor + clip is paired with plain clip_grad_norm_ (not with no monitoring):
        # both clip, so the ratio sits near 1, far from detect_anomaly's
        assert m["ratios"]["monitor_clip_vs_clip"] < m["ratios"]["detect_anomaly"]
        clip_ratio = m["ratios"]["monitor_clip_vs_clip"]
        assert data["targets"][f"{name}.monitor_clip_vs_clip<=1.05"] is (clip_ratio <= 1.05)
        assert data["targets"][f"{name}.monitor_default<=1.01"] is (
            m["ratios"]["monitor_default"] <= 1.01
        )
        assert data["targets"][f"{name}.monitor_cost_vs_total_norm<=1.05"] is (
            m["monitor_cost_vs_total_norm"] <= 1.05
        )
        # the clip action really clipped through the product, reusing the monitor's read
        assert m["clip_reused_norms"] is None or m["clip_reused_norms"] > 0
    assert data["models"]["linear_200x64"]["tensors"] == 100  # quick size
    s = data["streaming"]
    assert {"points_per_s", "messages_per_s", "sequence_gaps"} <= set(s)
    assert s["sequence_gaps"] == 0
    assert s["undecodable_blocks"] == 0  # names sent once still reach the panel
    assert s["prefilled_steps"] > 4096  # measured past the history capacity (a long run)
    assert s["points_delivered"] == s["points_recorded"] > 0
    # R08's rate limit holds by construction: no two messages closer than 100 ms, so
    # the rate between the first and the last is at most 10 a second
    assert s["messages"] >= 2 and s["min_message_gap_s"] >= 0.1
    assert 0 < s["messages_per_s"] <= 10
    assert data["targets"]["streaming.messages_per_s<=10"] is True
    assert data["targets"]["streaming.min_message_gap_s>=0.1"] is True
    assert data["targets"]["streaming.points_per_s>=100000"] is (s["points_per_s"] >= 100_000)
    # the log() section: wide log() calls streamed whole, their cost and sending share
    ls = data["log_streaming"]
    assert ls["series"] == 400 and ls["calls"] > 0
    assert ls["points_delivered"] == ls["points_recorded"] == ls["calls"] * 400
    assert ls["sequence_gaps"] == 0 and ls["undecodable_blocks"] == 0
    assert 0 < ls["log_us_per_call"] < 1e5 and 0 < ls["send_fraction"] < 1
    assert ls["dict_calls"] > 0 and 0 < ls["log_dict_us_per_call_median"] < 1e5
    assert 0 < ls["python_call_us"] < 1e5 and 0 < ls["python_call_us_median"] < 1e5
    for stat, suffix in (("median", "_median"), ("mean", "")):
        ratio = ls[f"log_us_per_call{suffix}"] / ls[f"python_call_us{suffix}"]
        key = f"log.us_per_call_{stat}<=2x_python_call_{stat}"
        assert data["targets"][key] is (ratio <= 2), key
        ratio = ls[f"log_dict_us_per_call{suffix}"] / ls[f"python_call_us{suffix}"]
        key = f"log.dict_us_per_call_{stat}<=2x_python_call_{stat}"
        assert data["targets"][key] is (ratio <= 2), key
    assert data["targets"]["log.send_fraction<=0.001"] is (ls["send_fraction"] <= 0.001)
    assert "log() of 400 values at 250 calls/s:" in proc.stdout
    # the run store and leak tracking, each paired with loads that have both off
    f = data["features"]
    assert set(f["ratios"]) == set(f["ci95"]) == {"record_store", "leak_tracking"}
    assert set(f["window_ms"]) == {"off", "record_store", "leak_tracking"}
    assert f["tool_errors"] == {} and f["primed_steps"] == WARMUP_STEPS
    assert f["steps_per_window"] >= 3
    # the store arm really had the store on, the others not
    assert f["store_state"] == {"off": "off", "leak_tracking": "off", "record_store": "on"}
    off = f["window_ms"]["off"]
    assert len(off) == f["segments"] * f["windows_per_segment"]
    for arm, v in f["ratios"].items():
        pairs = [a / b for a, b in zip(f["window_ms"][arm], off, strict=True)]
        assert v == pytest.approx(statistics.median(pairs), rel=1e-9), arm
        lo, hi = f["ci95"][arm]
        assert math.isfinite(v) and v > 0 and lo <= v <= hi, arm
        assert data["targets"][f"features.{arm}<=1.02"] is (v <= 1.02), arm
    assert "Record store and leak tracking (" in proc.stdout
    # %load_ext timed in fresh processes (torch imported first)
    ld = data["load"]
    assert ld["runs"] == 2 and len(ld["load_ext_ms_each"]) == 2
    assert 0 < ld["load_ext_ms_median"] < 60_000 and ld["reload_ext_ms_median"] > 0
    assert data["targets"]["load.load_ext_ms_median<=200"] is (ld["load_ext_ms_median"] <= 200)
    assert "%load_ext jupyterlab_torchdbg with torch imported:" in proc.stdout
    assert data["meta"]["quick"] is True and data["meta"]["tool_errors"] == {}
    assert data["meta"]["default_primed_steps"] == WARMUP_STEPS
    assert isinstance(data["targets"], dict)


def test_bench_rejects_unknown_models() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "jupyterlab_torchdbg.bench", "--quick", "--models", "resnet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "unknown model" in proc.stdout


def test_ranks_sim_json_shape(tmp_path: Path) -> None:
    """``--ranks-sim``: simulated workers in subprocesses, the kernel side's CPU here."""
    out = tmp_path / "sim.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyterlab_torchdbg.bench",
            "--ranks-sim",
            "4,8",
            "--ranks-sim-seconds",
            "3",
            "--ranks-sim-layers",
            "40",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| ranks | kernel CPU / wall |" in proc.stdout
    data = json.loads(out.read_text())
    worlds = data["ranks_sim"]["worlds"]
    assert set(worlds) == {"4", "8"} and data["ranks_sim"]["layers"] == 40
    for n, w in worlds.items():
        # every rank said hello and every message the simulators sent was taken, signed
        assert w["ranks_seen"] == w["ranks_in_last_message"] == int(n), n
        assert w["worker_messages_received"] == w["worker_messages_sent"] > int(n)
        assert w["refused"] == 0 and w["errors"] == []
        assert 0 < w["kernel_cpu_fraction"] < 2
        # the endpoint's thread (it verified every message) is among the kernel's threads
        if sys.platform == "linux":
            assert w["kernel_cpu_fraction_by_thread"].get("torchdbg-ranks", 0) > 0
        assert 0 < w["ranks_messages_per_s_to_panel"] <= 10.5
        assert w["ranks_message_bytes_max"] >= w["ranks_message_bytes_median"] > 0
    # the target is kept for 256 ranks only, as the check its name says
    assert data["targets"] == {}
    from jupyterlab_torchdbg.bench.ranks_sim import targets

    at = {**worlds["8"], "kernel_cpu_fraction": 0.02}
    assert targets({"worlds": {"256": at}}) == {"ranks_sim.kernel_cpu_fraction<=0.01": False}
    at["kernel_cpu_fraction"] = 0.005
    assert targets({"worlds": {"256": at}}) == {"ranks_sim.kernel_cpu_fraction<=0.01": True}
