"""Data-parallel training under the gradient monitor (R34), on CPU.

DDP: two gloo processes, each with its own data and the extension loaded in-process. The
monitor reads at the optimizer-step boundary, so what it records must be the norms of the
all-reduced (averaged) gradients, never a rank's local pre-reduce ones; and it must not
issue a collective of its own (R34, R35). Collectives are counted by the process group's
sequence number, which every collective on the group advances — DDP's C++ all-reduce as
well as any Python-level or functional call.

DataParallel: on CPU it runs the module directly; names drop the wrapper and norms are
exact. Its replica threads (and any threaded training) meet the one global hook: several
threads stepping their own optimizers at once must not lose, duplicate or mix up a row,
and a hook must read only the gradients of the optimizer stepping on its own thread
(``OwnedParameter`` notes any other read: racing that thread's backward() crashes torch).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim.optimizer as optim_mod
from grads_support import session

from jupyterlab_torchdbg.testing import memory_monitor

WORLD = 2
DDP_WARMUP = 3  # DDP rebuilds its buckets after the first iterations: not counted
DDP_STEPS = 6
LR = 0.1
#: Seconds for the whole two-process run (spawn + torch import dominate; ~10 s here).
DDP_TIMEOUT_S = 120.0


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def _batch(rank: int, step: int) -> torch.Tensor:
    """Each rank's own data; rank 1's is larger, so local and averaged norms differ."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(16, 6, generator=g) * (1.0 + 3.0 * rank)


def _loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).pow(2).mean()


def _norms(grads: dict[str, torch.Tensor], layers: dict[str, list[str]]) -> dict[str, float]:
    """Total and per-layer norms (a layer: its parameters' grads concatenated)."""
    out = {"total": float(torch.nn.utils.get_total_norm(list(grads.values())))}
    for layer, names in layers.items():
        cat = torch.cat([grads[n].flatten() for n in names])
        out[layer] = float(torch.linalg.vector_norm(cat))
    return out


# --- DDP (2 gloo processes) -------------------------------------------------------------


def _ddp_worker(rank: int, rdv: str, out_dir: str) -> None:
    """One rank: train under DDP, the monitor loaded; write what it saw and the references."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=rdv, rank=rank, world_size=WORLD, timeout=timedelta(seconds=60)
    )
    try:
        pg = dist.group.WORLD
        assert pg is not None
        seq = pg._get_sequence_number_for_group
        torch.manual_seed(0)
        model = _net()
        twin = copy.deepcopy(model)  # the reference: plain model, every rank's data
        ddp = DDP(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        layers = {"model.0": ["0.weight", "0.bias"], "model.2": ["2.weight", "2.bias"]}
        step_no = 0

        def step() -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
            """One DDP step, the twin in lockstep: (averaged, local, seen-at-step) norms."""
            nonlocal step_no
            step_no += 1
            per_rank = []
            for r in range(WORLD):
                twin.zero_grad()
                _loss(twin, _batch(r, step_no)).backward()
                per_rank.append({n: p.grad.clone() for n, p in twin.named_parameters()})
            mean = {n: sum(g[n] for g in per_rank) / WORLD for n in per_rank[0]}
            with torch.no_grad():  # plain SGD by hand: the twin is no optimizer to monitor
                for n, p in twin.named_parameters():
                    p.add_(mean[n], alpha=-LR)
            opt.zero_grad()
            _loss(ddp, _batch(rank, step_no)).backward()
            at_step = {n: p.grad.clone() for n, p in model.named_parameters()}
            opt.step()
            return _norms(mean, layers), _norms(per_rank[rank], layers), _norms(at_step, layers)

        for _ in range(DDP_WARMUP):
            step()
        s0 = seq()
        for _ in range(DDP_STEPS):
            step()
        without = seq() - s0

        # Bracket each step with every extension hook inside: a pre-hook registered before
        # the extension loads runs first, a post-hook registered after it runs last.
        in_steps: list[int] = []
        mark: list[int] = []
        first = optim_mod.register_optimizer_step_pre_hook(lambda o, a, k: mark.append(seq()))
        python_calls: list[str] = []
        patched = {}
        for fn in ("all_reduce", "broadcast", "all_gather", "reduce_scatter_tensor", "barrier"):
            orig = getattr(dist, fn)

            def counting(*a: Any, _fn: str = fn, _orig: Any = orig, **k: Any) -> Any:
                if mark:
                    python_calls.append(_fn)
                return _orig(*a, **k)

            patched[fn] = orig
            setattr(dist, fn, counting)
        try:
            s1 = seq()
            with session({"model": ddp, "opt": opt}) as s:
                last = optim_mod.register_optimizer_step_post_hook(
                    lambda o, a, k: in_steps.append(seq() - mark.pop())
                )
                try:
                    s.comm.action("set_stride", {"stride": 1})
                    expected, local, seen = [], [], []
                    for _ in range(DDP_STEPS):
                        e, lo, se = step()
                        expected.append(e)
                        local.append(lo)
                        seen.append(se)
                finally:
                    last.remove()
                s.end_cell()
                # load, steps and cell end: the extension's whole life in this process
                with_monitor = seq() - s1
                track = s.track("opt")
                series = {k: [v[0].tolist(), v[1].tolist()] for k, v in s.comm.series().items()}
                result = {
                    "rank": rank,
                    "errors": dict(s.ext.errors),
                    "tracks": [t["name"] for t in s.status()["tracks"]],
                    "layers": [li["name"] for li in track["layers"]],
                    "step": track["step"],
                    "sampled": track["sampled"],
                    "local_shard": track["local_shard"],
                    "series": series,
                    "expected": expected,
                    "local": local,
                    "seen": seen,
                    "collectives_without": without,
                    "collectives_with": with_monitor,
                    "collectives_in_steps": in_steps,
                    "python_calls_in_steps": python_calls,
                }
        finally:
            first.remove()
            for fn, orig in patched.items():
                setattr(dist, fn, orig)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
        dist.barrier()  # neither rank tears the group down while the other still reduces
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Both ranks' results (one two-process run shared by the DDP tests)."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    tmp = tmp_path_factory.mktemp("ddp")
    rdv = (tmp / "rendezvous").as_uri()  # file:// rendezvous: no network at all
    ctx = mp.start_processes(
        _ddp_worker, args=(rdv, str(tmp)), nprocs=WORLD, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + DDP_TIMEOUT_S
    try:
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise AssertionError(f"DDP workers still running after {DDP_TIMEOUT_S} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join()
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(WORLD)]


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)


def test_r34_ddp_monitor_records_all_reduced_norms_not_local(
    ddp_run: list[dict[str, Any]],
) -> None:
    names = ["total", "model.0", "model.2"]
    for res in ddp_run:
        rank = res["rank"]
        assert res["errors"] == {}, rank
        assert res["tracks"] == ["opt"], rank
        assert res["layers"] == ["model.0", "model.2"], rank  # DDP's `module.` dropped
        assert res["step"] == DDP_STEPS and res["sampled"] == DDP_STEPS, rank
        assert res["local_shard"] is False, rank  # replicated grads are whole, not shards
        for name in names:
            xs, ys = res["series"][f"grad/opt/{name}"]
            assert xs == list(range(1, DDP_STEPS + 1)), (rank, name)
            want = [e[name] for e in res["expected"]]
            local = [lo[name] for lo in res["local"]]
            seen = [se[name] for se in res["seen"]]
            # the reference is right: DDP's grads at step() are the twin's averaged ones
            assert all(map(_close, seen, want)), (rank, name, seen, want)
            # ... and it can tell: every rank's local grads differ from the average
            assert not any(map(_close, local, want)), (rank, name, local, want)
            assert all(map(_close, ys, want)), (rank, name, ys, want)
    # the average is the same on every rank, and so is what each rank's monitor recorded
    a, b = (res["series"]["grad/opt/total"][1] for res in ddp_run)
    assert a == pytest.approx(b, rel=1e-6)


def test_r34_ddp_monitor_issues_no_collective(ddp_run: list[dict[str, Any]]) -> None:
    for res in ddp_run:
        rank = res["rank"]
        # the counter works: DDP itself all-reduces at least once per step
        assert res["collectives_without"] >= DDP_STEPS, rank
        # with the extension loaded and sampling every step: not one collective more ...
        assert res["collectives_with"] == res["collectives_without"], rank
        # ... and none inside a step (every extension pre- and post-hook), by any path
        assert res["collectives_in_steps"] == [0] * DDP_STEPS, rank
        assert res["python_calls_in_steps"] == [], rank


# --- DataParallel and threads (in-process) ----------------------------------------------


def _layer_norms(model: nn.Module, layers: dict[str, list[str]]) -> dict[str, float]:
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return _norms(grads, layers)


LAYERS = {"0": ["0.weight", "0.bias"], "2": ["2.weight", "2.bias"]}


def test_r34_data_parallel_names_and_norms() -> None:
    torch.manual_seed(0)
    model = _net()
    dp = nn.DataParallel(model)  # on CPU: runs the module itself, no replicas
    opt = torch.optim.SGD(dp.parameters(), lr=0.1)
    expected = []
    with session({"net": dp, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        for i in range(5):
            opt.zero_grad()
            _loss(dp, _batch(1, i)).backward()
            expected.append(_layer_norms(model, LAYERS))
            opt.step()
        s.end_cell()
        assert not s.ext.errors
        track = s.track()
        assert [li["name"] for li in track["layers"]] == ["net.0", "net.2"]
        assert track["step"] == 5 and track["sampled"] == 5
        series = s.comm.series()
        for key, name in (("total", "total"), ("0", "net.0"), ("2", "net.2")):
            xs, ys = series[f"grad/opt/{name}"]
            assert xs.tolist() == [1, 2, 3, 4, 5]
            assert ys.tolist() == pytest.approx([e[key] for e in expected], rel=1e-5)


THREADS = 4
THREAD_STEPS = 200


class OwnedParameter(nn.Parameter):
    """A parameter that notes every read of its ``.grad`` from a thread other than its owner.

    Reading ``.grad`` while the owning thread is in ``backward()`` is a data race inside
    torch (it can crash the process), so a step hook running on one thread must read only
    the gradients of the optimizer stepping on that thread (R34). Autograd writes the
    gradient in C++ and is not affected; Python reads (optimizers, the tool) come here.
    """

    owner: int | None = None  # the training thread's ident
    owner_name = ""
    foreign: list[str] | None = None  # where foreign reads are noted, while watched

    @property  # type: ignore[override]
    def grad(self) -> torch.Tensor | None:
        foreign = self.foreign
        if foreign is not None and self.owner not in (None, threading.get_ident()):
            f = sys._getframe(1)
            foreign.append(
                f"{threading.current_thread().name} read {self.owner_name}'s grad at "
                f"{Path(f.f_code.co_filename).name}:{f.f_lineno} ({f.f_code.co_name})"
            )
        return torch.Tensor.grad.__get__(self)  # type: ignore[attr-defined]

    @grad.setter
    def grad(self, value: torch.Tensor | None) -> None:
        torch.Tensor.grad.__set__(self, value)  # type: ignore[attr-defined]


def _owned_net() -> nn.Module:
    model = _net()
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[name] = OwnedParameter(p.detach().clone())
    return model


class ThreadedTraining:
    """``THREADS`` models and optimizers (``m0``/``opt0``...), each trained on its own thread."""

    def __init__(self, steps: int, turns: bool = False) -> None:
        torch.manual_seed(0)
        self.steps = steps
        self.models = [_owned_net() for _ in range(THREADS)]
        self.opts = [torch.optim.SGD(m.parameters(), lr=0.01) for m in self.models]
        self.ns: dict[str, Any] = {}
        for i in range(THREADS):
            self.ns[f"m{i}"], self.ns[f"opt{i}"] = self.models[i], self.opts[i]
        self.expected: list[list[dict[str, float]]] = [[] for _ in range(THREADS)]
        self.failures: list[BaseException] = []
        self.foreign: list[str] = []
        self._start = threading.Barrier(THREADS)
        # One step at a time (threads take turns): hooks still run on every thread, but
        # never while another thread is in backward(), so a foreign read is noted, not fatal.
        self._turn = threading.Lock() if turns else None

    def _train(self, i: int) -> None:
        try:
            model, opt = self.models[i], self.opts[i]
            for p in model.parameters():
                assert isinstance(p, OwnedParameter)
                p.owner, p.foreign = threading.get_ident(), self.foreign
                p.owner_name = threading.current_thread().name
            g = torch.Generator().manual_seed(i)
            self._start.wait()  # every owner is known before any thread steps
            for _ in range(self.steps):
                with self._turn or contextlib.nullcontext():
                    opt.zero_grad()
                    _loss(model, torch.randn(16, 6, generator=g) * (i + 1)).backward()
                    self.expected[i].append(_layer_norms(model, LAYERS))
                    opt.step()
        except BaseException as e:  # reported by run(): a thread's exception is otherwise lost
            self.failures.append(e)

    def run(self) -> None:
        threads = [threading.Thread(target=self._train, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        for m in self.models:  # reads from now on (cell end, snapshots) race with nothing
            for p in m.parameters():
                p.foreign = None  # type: ignore[attr-defined]
        assert not any(t.is_alive() for t in threads)
        assert not self.failures, self.failures


def test_r34_threads_stepping_own_optimizers_through_one_hook() -> None:
    """4 threads x 200 steps at once: every row kept, in its own track, with exact norms."""
    run = ThreadedTraining(THREAD_STEPS)
    with session(run.ns) as s:
        s.comm.action("set_stride", {"stride": 1})
        s.ext.stream.interval_s = 0.0  # flush at every step: flushes race with records
        run.run()
        s.end_cell()
        assert run.foreign == []  # no hook read another thread's gradients
        assert not s.ext.errors, s.ext.errors
        tracks = {t["name"]: t for t in s.status()["tracks"]}
        assert sorted(tracks) == [f"opt{i}" for i in range(THREADS)]
        series = s.comm.series()
        for i in range(THREADS):
            track = tracks[f"opt{i}"]
            assert track["step"] == THREAD_STEPS and track["sampled"] == THREAD_STEPS, track
            assert [li["name"] for li in track["layers"]] == [f"m{i}.0", f"m{i}.2"]
            expected = run.expected[i]
            for key, name in (("total", "total"), ("0", f"m{i}.0"), ("2", f"m{i}.2")):
                xs, ys = series[f"grad/opt{i}/{name}"]
                assert xs.tolist() == list(range(1, THREAD_STEPS + 1)), (i, name)
                want = [e[key] for e in expected]
                assert ys.tolist() == pytest.approx(want, rel=1e-5), (i, name)
            # the layer table's statistics saw every row, the last one last
            stats = track["stats"]
            for j, key in enumerate(("total", "0", "2")):
                want = [e[key] for e in expected]
                got = [stats[k][j] for k in ("last", "max", "min")]
                assert got == pytest.approx([want[-1], max(want), min(want)], rel=1e-5), (i, key)
                assert stats["nonfinite"][j] == 0
        assert s.comm.alerts() == []


def test_r34_threads_whole_extension_reads_only_its_own_threads_grads() -> None:
    """Every feature's step hooks as loaded (memory breakdown included), threads taking turns.

    Deterministic: a breakdown is made due at every step, so a feature that reads other
    models' gradients is caught at once, without waiting for the crash (reading ``p.grad``
    while another thread's backward() writes it is a data race inside torch: SIGSEGV).
    """
    run = ThreadedTraining(20, turns=True)
    with session(run.ns) as s:
        s.comm.action("set_stride", {"stride": 1})
        mem = memory_monitor()
        assert mem is not None
        breakdowns: list[dict[str, Any]] = []
        real = mem.update_breakdown

        def every_step() -> dict[str, Any]:
            b = real()
            breakdowns.append(b)
            mem._next_breakdown = 0.0  # due again at the next step, on whichever thread
            return b

        mem.update_breakdown = every_step  # type: ignore[method-assign]
        mem._next_breakdown = 0.0
        run.run()
        assert len(breakdowns) >= THREADS * 20
        assert not s.ext.errors, s.ext.errors
        assert run.foreign == [], run.foreign[:5]
        # each thread counted its own model's gradients and left the others out, saying so
        cpu = [next(r for r in b["devices"] if r["device"] == "cpu") for b in breakdowns]
        assert all(r["gradients"] > 0 for r in cpu[THREADS:])
        assert all(b["skipped_grads"] > 0 and "several threads" in b["note"] for b in breakdowns)
        mem.update_breakdown = real  # type: ignore[method-assign]
        s.end_cell()


def test_r34_cpu_oom_autopsy_reads_only_its_own_threads_grads() -> None:
    """The OOM autopsy (gradients by name, breakdown) run on one thread while another
    thread owns a model: that model's ``.grad`` is not read (a race with its backward)."""
    from jupyterlab_torchdbg.kernel.memory import autopsy
    from jupyterlab_torchdbg.kernel.memory import breakdown as bd
    from jupyterlab_torchdbg.kernel.memory.sources import DeviceReading, Reading, RecordedSource

    mine, theirs = _owned_net(), _owned_net()
    for model in (mine, theirs):
        _loss(model, torch.randn(4, 6)).backward()
    foreign: list[str] = []
    for p in theirs.parameters():
        p.owner, p.foreign, p.owner_name = -1, foreign, "trainer"  # type: ignore[attr-defined]
    ns = {"mine": mine, "theirs": theirs}
    allowed = {id(p) for p in mine.parameters()}

    def fails() -> None:
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 400000000000 bytes."
        )

    try:
        fails()
    except RuntimeError as e:
        exc = e
    facts = autopsy.oom_facts(exc)
    assert facts is not None

    def build(own: Any) -> dict[str, Any]:
        return autopsy.build(
            exc,
            facts,
            ns=ns,
            allocator=RecordedSource("allocator", [Reading(True, None, [DeviceReading(0, {})])]),
            found=bd.discover(ns),
            rss=2**30,
            own=own,
        )

    body = build(lambda obj: id(obj) in allowed)
    assert foreign == []
    names = {r["name"] for r in body["tensors"]}
    assert "mine.0.weight.grad" in names and "theirs.0.weight.grad" not in names
    assert body["breakdown"]["gradients"] > 0  # its own model's gradients are counted
    build(None)  # one thread only: everything may be read (and this test can fail)
    assert foreign
