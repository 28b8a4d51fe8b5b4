"""The results as a Markdown table (what the README shows) and the targets check."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from typing_extensions import NotRequired, TypedDict

if TYPE_CHECKING:
    from .features import Features
    from .load import Load
    from .log_stream import LogStreaming
    from .streaming import Streaming
    from .variants import MonitorStats


class Meta(TypedDict):
    """Where and how the benchmark ran (``tool_*`` and ``seconds`` once it has)."""

    torch: str
    python: str
    platform: str
    device: str
    threads: int
    quick: bool
    rounds: int
    warmup: int
    steps_per_variant_per_round: int
    step: str
    variants: list[str]
    default_primed_steps: int
    tool_errors: NotRequired[dict[str, int]]
    tool_alerts: NotRequired[int]
    seconds: NotRequired[float]


class ModelResult(TypedDict):
    """One model's figures: each variant's step-time ratio to no monitoring, and more."""

    description: str
    tensors: int
    params: int
    step_ms: float
    ratios: dict[str, float]
    ci95: dict[str, list[float]]
    monitor_cost_vs_total_norm: NotRequired[float]
    monitor_cost_vs_total_norm_ci95: NotRequired[list[float]]
    monitor_us: NotRequired[float | None]
    total_norm_us: NotRequired[float | None]
    monitor_default: NotRequired[MonitorStats]
    monitor_periodic_us: NotRequired[float]
    monitor_periodic_share: NotRequired[float | None]
    flush_interval_s: NotRequired[float]
    cuda: NotRequired[dict[str, object]]
    clip_reused_norms: NotRequired[int | None]


class BenchResults(TypedDict):
    """``python -m jupyterlab_torchdbg.bench``'s results (its ``--json``)."""

    meta: Meta
    models: dict[str, ModelResult]
    features: NotRequired[Features]
    streaming: NotRequired[Streaming]
    log_streaming: NotRequired[LogStreaming]
    load: NotRequired[Load]
    targets: NotRequired[dict[str, object]]


ROWS = (
    ("loaded_idle", "extension loaded, idle"),
    ("monitor_every_step", "monitor, every step"),
    ("monitor_default", "monitor, default (auto stride)"),
    ("naive_loop", "`p.grad.norm().item()` loop"),
    ("total_norm", "`get_total_norm(...).item()`"),
    ("detect_anomaly", "`set_detect_anomaly(True)`"),
    ("monitor_clip", "monitor + clip action"),
    ("clip_grad_norm", "`clip_grad_norm_(params, 1.0)`"),
)


def _cell(v: float | None, ci: list[float] | None) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    if ci and all(math.isfinite(c) for c in ci):
        return f"{v:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
    return f"{v:.3f}"


def table(results: BenchResults) -> str:
    models = results["models"]
    names = list(models)
    head = "| step-time ratio to no monitoring | " + " | ".join(
        f"{models[n]['description']}" for n in names
    )
    lines = [head + " |", "|---" * (len(names) + 1) + "|"]
    for key, label in ROWS:
        cells = [_cell(models[n]["ratios"].get(key), models[n]["ci95"].get(key)) for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = [
        _cell(models[n]["monitor_cost_vs_total_norm"], models[n]["monitor_cost_vs_total_norm_ci95"])
        for n in names
    ]
    lines.append("| monitor's own time ÷ `get_total_norm`'s | " + " | ".join(cells) + " |")
    cells = [
        _cell(
            models[n]["ratios"].get("monitor_clip_vs_clip"),
            models[n]["ci95"].get("monitor_clip_vs_clip"),
        )
        for n in names
    ]
    lines.append("| monitor + clip action ÷ `clip_grad_norm_` | " + " | ".join(cells) + " |")
    cells = [
        _us(models[n].get("monitor_us")) + " ÷ " + _us(models[n].get("total_norm_us"))
        for n in names
    ]
    lines.append("| (µs per step: monitor ÷ `get_total_norm`) | " + " | ".join(cells) + " |")
    cells = [_us(models[n].get("monitor_periodic_us")) for n in names]
    lines.append("| monitor's periodic work (flush, alarms), µs each | " + " | ".join(cells) + " |")
    cells = [str(models[n].get("monitor_default", {}).get("stride", "n/a")) for n in names]
    lines.append("| stride chosen by default | " + " | ".join(cells) + " |")
    cells = [_implied(models[n].get("monitor_default", {})) for n in names]
    lines.append(
        "| stride the read implies: read (ms) ÷ (budget * step (ms)) | " + " | ".join(cells) + " |"
    )
    cells = [f"{models[n]['step_ms']:.2f}" for n in names]
    lines.append("| step time without monitoring (ms) | " + " | ".join(cells) + " |")
    lines += _sampling(models)
    s = results.get("streaming")
    if s:
        lines.append("")
        lines.append(
            f"Streaming {s['series']} series at {s['steps_per_s_offered']:.0f} steps/s: "
            f"{s['points_per_s']:,.0f} points/s, {s['messages_per_s']:.1f} messages/s, "
            f"{s['bytes_per_s'] / 1e6:.2f} MB/s, {s['kernel_us_per_flush']:.0f} µs per flush "
            f"({100 * s['send_fraction']:.3f}% of wall time), {s['sequence_gaps']} sequence gaps."
        )
    f = results.get("features")
    if f:
        from .features import summary as features_summary

        lines.append("")
        lines.append(features_summary(f))
    ls = results.get("log_streaming")
    if ls:
        lines.append("")
        lines.append(log_summary(ls))
    ld = results.get("load")
    if ld:
        from .load import summary

        lines.append("")
        lines.append(summary(ld))
    return "\n".join(lines)


def _implied(d: MonitorStats) -> str:
    read, step, implied = d.get("read_cost_s"), d.get("step_time_s"), d.get("implied_stride")
    if read is None or not step or implied is None:
        return "n/a"
    return f"{implied} ({read * 1e3:.3f} ÷ ({d['budget']:g} * {step * 1e3:.2f}))"


def _sampling(models: dict[str, ModelResult]) -> list[str]:
    """Why each model's default stride is what it is (the panel's words), and what the
    periodic work cost apart from it."""
    out = ["", "Default sampling after the warm-up (only the read counts against the stride):"]
    for m in models.values():
        d = m.get("monitor_default", {})
        periodic = m.get("monitor_periodic_us")
        share, flush = m.get("monitor_periodic_share"), m.get("flush_interval_s")
        extra = "" if periodic is None else f"; periodic work {periodic:.0f} µs a pass"
        if share is not None:
            extra += f", {100 * share:.2f}% of wall time"
        if flush is not None:
            extra += f", flushing every {flush:.2f} s"
        out.append(f"- {m['description']}: {d.get('stride_reason', 'n/a')}{extra}")
    return out


def _us(v: float | None) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.0f}"


def targets(results: BenchResults) -> dict[str, object]:
    """Each PERFORMANCE.md target this run can check, with its measured value."""
    out: dict[str, object] = {}
    for name, m in results["models"].items():
        out[f"{name}.monitor_cost_vs_total_norm<=1.05"] = _met(
            m["monitor_cost_vs_total_norm"], 1.05
        )
        out[f"{name}.monitor_default<=1.01"] = _met(m["ratios"].get("monitor_default"), 1.01)
        out[f"{name}.monitor_clip_vs_clip<=1.05"] = _met(
            m["ratios"].get("monitor_clip_vs_clip"), 1.05
        )
        d = m.get("monitor_default", {})
        implied = d.get("implied_stride")
        if implied is not None:
            # the chosen stride matches what the measured read cost implies (within 2x)
            ratio = d["stride"] / implied
            out[f"{name}.default_stride_within_2x_of_read"] = 0.5 <= ratio <= 2
        if "cuda" in m:
            out[f"{name}.cuda_syncs_added_per_step==0"] = m["cuda"].get("syncs_added_per_step") == 0
    s = results.get("streaming")
    if s:
        out["streaming.points_per_s>=100000"] = s["points_per_s"] >= 100_000
        out["streaming.messages_per_s<=10"] = _met(s["messages_per_s"], 10)
        out["streaming.min_message_gap_s>=0.1"] = _at_least(s.get("min_message_gap_s"), 0.1)
        out["streaming.sequence_gaps==0"] = s["sequence_gaps"] == 0
        out["streaming.send_fraction<=0.001"] = s["send_fraction"] <= 0.001
    ls = results.get("log_streaming")
    if ls:
        # paced (cold caches, as in training), against CPython's own call of an empty
        # function with the same 400 keywords in the same run; the median and the mean
        # each checked (a preempted call moves the mean of both loops)
        for stat, log_us, dict_us, python_us in (
            (
                "median",
                ls["log_us_per_call_median"],
                ls["log_dict_us_per_call_median"],
                ls["python_call_us_median"],
            ),
            ("mean", ls["log_us_per_call"], ls["log_dict_us_per_call"], ls["python_call_us"]),
        ):
            log_ratio = _ratio(log_us, python_us)
            out[f"log.us_per_call_{stat}<=2x_python_call_{stat}"] = _met(log_ratio, 2)
            # the dict form, log(step, metrics), against the same keyword call
            dict_ratio = _ratio(dict_us, python_us)
            out[f"log.dict_us_per_call_{stat}<=2x_python_call_{stat}"] = _met(dict_ratio, 2)
        out["log.send_fraction<=0.001"] = _met(ls["send_fraction"], 0.001)
    f = results.get("features")
    if f:
        # the run store and leak tracking, each against the extension without them
        for arm in ("record_store", "leak_tracking"):
            out[f"features.{arm}<=1.02"] = _met(f["ratios"].get(arm), 1.02)
    ld = results.get("load")
    if ld and "error" not in ld:
        out["load.load_ext_ms_median<=200"] = _met(ld["load_ext_ms_median"], 200)
    return out


def _met(v: float | None, limit: float) -> bool | None:
    """``v <= limit``; None when ``v`` was not measured."""
    if v is None or not math.isfinite(v):
        return None
    return v <= limit


def _at_least(v: float | None, limit: float) -> bool | None:
    if v is None or not math.isfinite(v):
        return None
    return v >= limit


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return None
    return a / b


def log_summary(s: LogStreaming) -> str:
    """The log() section in one line (``log_stream``)."""
    from .log_stream import summary

    return summary(s)
