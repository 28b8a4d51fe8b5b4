"""CLI: ``python -m jupyterlab_torchdbg.bench [--quick] [--json PATH]``.

``--ranks``: only the multi-process section (bench/ranks.py: 4 gloo ranks on CPU,
attached against not; about two minutes), never part of the default run or ``--quick``.
``--ranks-sim N[,N...]``: only the simulated-ranks section (bench/ranks_sim.py: the
kernel side's CPU with N simulated workers; default 256, ``--ranks-sim-seconds`` each).

Runs on CPU in a few minutes (``--quick``: seconds, tiny models), on CUDA when present.
Prints a Markdown table; ``--json`` writes every number (see ``report.targets`` for the
PERFORMANCE.md targets it checks).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..kernel.extension import Extension
    from .report import BenchResults, ModelResult
    from .variants import Runner

#: (rounds, warm-up rounds, consecutive steps per variant per round)
FULL = (24, 2, 4)
QUICK = (10, 2, 3)
CUDA_WINDOW = 20


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m jupyterlab_torchdbg.bench",
        description="Overhead of the gradient monitor against the alternatives (paired ratios).",
    )
    p.add_argument("--quick", action="store_true", help="tiny models, few rounds (seconds)")
    p.add_argument("--json", metavar="PATH", help="write machine-readable results here")
    p.add_argument("--rounds", type=int, help="measured rounds per model")
    p.add_argument("--warmup", type=int, help="discarded warm-up rounds per model")
    p.add_argument("--block", type=int, help="consecutive steps per variant in a round")
    p.add_argument("--models", help="comma-separated subset of the models")
    p.add_argument("--stream-seconds", type=float, help="length of the streaming section")
    p.add_argument(
        "--profile-stream",
        action="store_true",
        help="profile the streaming section's flushes (cProfile, printed on stderr)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads on CPU (default 1: a shared machine's other load makes "
        "multi-threaded step times erratic)",
    )
    p.add_argument(
        "--ranks",
        action="store_true",
        help="only the multi-process section: 4 gloo ranks on CPU, attached vs not",
    )
    p.add_argument(
        "--ranks-sim",
        nargs="?",
        const="256",
        metavar="N[,N...]",
        help="only the simulated-ranks section: the kernel's CPU with N simulated workers",
    )
    p.add_argument("--ranks-sim-seconds", type=float, default=20.0, help="per world size")
    p.add_argument(
        "--ranks-sim-layers",
        type=int,
        default=None,
        help="layers each simulated rank reports (default 6; a real model's: hundreds)",
    )
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _cuda_extras(runners: dict[str, Runner], steps: int) -> dict[str, object]:
    """Host-device syncs added per monitored step (R26), counted by torch's sync debug mode."""
    import torch

    def syncs(runner: Runner) -> int:
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                for _ in range(steps):
                    runner.step()
            finally:
                torch.cuda.set_sync_debug_mode(0)
        return sum(1 for w in caught if "synchroniz" in str(w.message).lower())

    base = syncs(runners["none"])
    mon = syncs(runners["monitor_every_step"])
    return {
        "syncs_added_per_step": (mon - base) / steps,
        "syncs_per_step_none": base / steps,
        "timing": "CUDA events over windows of 20 steps",
    }


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.ranks:
        return _ranks(args)
    if args.ranks_sim:
        return _ranks_sim(args)
    import torch

    from ..kernel.grads.stride import WARMUP_STEPS
    from ..testing import loaded_extension
    from .features import run_features
    from .load import run_load
    from .log_stream import run_log_streaming
    from .models import FACTORIES, build
    from .paired import median_ci, paired_ratios, ratio_of_medians_ci, run_rounds
    from .report import table, targets
    from .streaming import run_streaming
    from .variants import VARIANTS, Runner

    quick = args.quick
    d_rounds, d_warmup, d_block = QUICK if quick else FULL
    rounds = args.rounds or d_rounds
    warmup = args.warmup if args.warmup is not None else d_warmup
    names = args.models.split(",") if args.models else list(FACTORIES)
    unknown = [n for n in names if n not in FACTORIES]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)}; choose from {', '.join(FACTORIES)}")
        return 2
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if use_cuda else "cpu")
    if not use_cuda:
        torch.set_num_threads(max(1, args.threads))
    window = args.block or (CUDA_WINDOW if use_cuda else d_block)
    rng = random.Random(args.seed)
    t_start = time.perf_counter()
    results: BenchResults = {
        "meta": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "device": str(device),
            "threads": torch.get_num_threads(),
            "quick": quick,
            "rounds": rounds,
            "warmup": warmup,
            "steps_per_variant_per_round": window,
            "step": "forward + backward + AdamW step",
            "variants": list(VARIANTS),
            "default_primed_steps": WARMUP_STEPS,
        },
        "models": {},
    }
    with loaded_extension() as loaded:
        for name in names:
            work = build(name, quick, seed=args.seed)
            runners = {v: Runner(v, work, device) for v in VARIANTS}
            # The auto mode samples every step for the first WARMUP_STEPS steps of a run
            # (by design: early blow-ups); the default is measured after that, as in a
            # long run. Those steps cost what "monitor every step" costs, once per run.
            # Every variant trains as many steps first, so the model copies stay alike
            # (a model trained longer can step slower: tiny values, denormal floats).
            for _ in range(WARMUP_STEPS):
                for runner in runners.values():
                    runner.step()
            mon = loaded.ext.grads
            periodic0 = (mon.periodic.total_s, mon.periodic.count) if mon is not None else (0.0, 0)
            reused0 = _clip_reused(loaded.ext)
            times = run_rounds(
                runners, rounds, warmup, seed=args.seed, window=window, cuda=use_cuda
            )
            ratios = paired_ratios(times)
            model_out: ModelResult = {
                "description": work.description,
                "tensors": work.tensors,
                "params": work.params,
                "step_ms": statistics.median(times["none"]) * 1e3,
                "ratios": {},
                "ci95": {},
            }
            # monitor + clip action against plain clip_grad_norm_, paired within rounds
            ratios["monitor_clip_vs_clip"] = paired_ratios(times, base="clip_grad_norm")[
                "monitor_clip"
            ]
            for v, rs in ratios.items():
                point, lo, hi = median_ci(rs, rng)
                model_out["ratios"][v] = point
                model_out["ci95"][v] = [lo, hi]
            mon_own = runners["monitor_every_step"].own
            tn_own = runners["total_norm"].own
            point, lo, hi = ratio_of_medians_ci(mon_own, tn_own, rng)
            model_out["monitor_cost_vs_total_norm"] = point
            model_out["monitor_cost_vs_total_norm_ci95"] = [lo, hi]
            model_out["monitor_us"] = statistics.median(mon_own) * 1e6 if mon_own else None
            model_out["total_norm_us"] = statistics.median(tn_own) * 1e6 if tn_own else None
            model_out["monitor_default"] = runners["monitor_default"].stats()
            # Periodic work runs on wall time (the flush interval): rounds shorter than one
            # interval (--quick on a fast machine) saw none, so keep stepping until one pass.
            deadline = time.perf_counter() + 5.0
            while (
                mon is not None
                and mon.periodic.count == periodic0[1]
                and time.perf_counter() < deadline
            ):
                runners["monitor_default"].step()
            if mon is not None and mon.periodic.count > periodic0[1]:
                # flush + alarm checks + status, done at most ~10 times a second (fewer when
                # that work is over its own budget: see stride.Periodic)
                n = mon.periodic.count - periodic0[1]
                model_out["monitor_periodic_us"] = (mon.periodic.total_s - periodic0[0]) / n * 1e6
                model_out["monitor_periodic_share"] = mon.periodic.share
                model_out["flush_interval_s"] = loaded.ext.stream.interval_s * mon.periodic.slowdown
            if use_cuda:
                model_out["cuda"] = _cuda_extras(runners, 20)
            for r in runners.values():
                r.close()
            loaded.end_cell()
            reused1 = _clip_reused(loaded.ext)
            model_out["clip_reused_norms"] = (
                None if reused0 is None or reused1 is None else reused1 - reused0
            )
            results["models"][name] = model_out
            print(f"  {name}: done ({time.perf_counter() - t_start:.0f} s)", file=sys.stderr)
        mon = loaded.ext.grads
        results["meta"]["tool_errors"] = dict(loaded.ext.errors)
        results["meta"]["tool_alerts"] = mon.alerts.total if mon is not None else 0
    # the run store and leak tracking against the same extension without them (features.py)
    results["features"] = run_features(
        build(names[0], quick, seed=args.seed), device, quick, seed=args.seed
    )
    print(f"  features: done ({time.perf_counter() - t_start:.0f} s)", file=sys.stderr)
    seconds = args.stream_seconds or (0.5 if quick else 3.0)
    results["streaming"] = run_streaming(seconds, profile=args.profile_stream)
    results["log_streaming"] = run_log_streaming(max(seconds, 1.0) if quick else 10.0)
    results["load"] = run_load(2 if quick else 5)
    results["targets"] = targets(results)
    results["meta"]["seconds"] = round(time.perf_counter() - t_start, 1)
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, allow_nan=False, default=_finite))
    return 0


def _ranks(args: argparse.Namespace) -> int:
    from .ranks import ROUNDS, run_ranks, table

    result = run_ranks(rounds=args.rounds or ROUNDS, seed=args.seed)
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps({"ranks": result}, indent=2, default=_finite))
    return 0


def _ranks_sim(args: argparse.Namespace) -> int:
    from .ranks_sim import LAYERS, run_ranks_sim, table, targets

    worlds = [int(w) for w in str(args.ranks_sim).split(",") if w.strip()]
    layers = LAYERS if args.ranks_sim_layers is None else args.ranks_sim_layers
    result = run_ranks_sim(worlds, args.ranks_sim_seconds, layers)
    print(table(result))
    if args.json:
        out = {"ranks_sim": result, "targets": targets(result)}
        Path(args.json).write_text(json.dumps(out, indent=2, default=_finite))
    return 0


def _clip_reused(ext: Extension) -> int | None:
    """Clipped steps so far whose total norm came from the monitor's read."""
    return ext.control.clipper.reused if ext.control is not None else None


def _finite(o: object) -> str:
    return str(o)


if __name__ == "__main__":
    raise SystemExit(main())
