"""The run registry's rules (runs.py) and the stream's per-run blocks, without a kernel.

The same rules in a real kernel (re-run cells, GAN, logged step going backwards, the
blocks and alerts a panel gets) are in test_runs_kernel.py.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from jupyterlab_torchdbg.kernel import runs as runs_mod
from jupyterlab_torchdbg.kernel.runs import RUN_IDLE_S, Runs
from jupyterlab_torchdbg.kernel.stream import Stream, limits


class Opt:
    """Stands for an optimizer object (the registry only keeps weak references)."""


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def registry() -> tuple[Runs, list[dict[str, Any]], list[tuple[str, int]], Clock]:
    sent: list[dict[str, Any]] = []
    events: list[tuple[str, int]] = []
    clock = Clock()
    r = Runs(sent.append, lambda site: None, clock=clock)
    r.on_change(lambda ev, run: events.append((ev, run.id)))
    r._ensure_watcher = lambda: None  # type: ignore[method-assign]  # the test ticks
    return r, sent, events, clock


def test_first_step_starts_a_run_and_the_cell_end_ends_it() -> None:
    r, sent, events, _ = registry()
    opt = Opt()
    r.cell_started("cell-a", 3)
    run = r.at_step(opt, lambda: "opt")
    assert (run.id, run.reason, run.steps) == (1, "first", 1)
    r.at_step(opt, lambda: "opt")
    assert r.current_id == 1 and r.current is not None and r.current.steps == 2
    assert not r.idle()
    r.cell_ended()
    assert r.current is None and r.idle()
    assert events == [("start", 1), ("end", 1)]
    msg = sent[-1]
    assert msg["current"] is None
    (info,) = msg["runs"]
    assert info["cell_id"] == "cell-a" and info["execution_count"] == 3
    assert info["optimizers"] == ["opt"] and info["steps"] == 2 and info["end"] is not None
    # the re-run cell: a new run, "idle"
    r.cell_started("cell-a", 4)
    run2 = r.at_step(opt, lambda: "opt")
    assert (run2.id, run2.reason, run2.steps) == (2, "idle", 1)


def test_two_optimizers_in_one_cell_are_one_run_a_new_one_in_another_cell_is_not() -> None:
    r, _, events, _ = registry()
    d_opt, g_opt = Opt(), Opt()
    r.cell_started("gan", 1)
    for _ in range(3):
        r.at_step(d_opt, lambda: "d_opt")
        r.at_step(g_opt, lambda: "g_opt")
    assert r.current is not None
    assert r.current.id == 1 and r.current.optimizers == ["d_opt", "g_opt"]
    assert r.current.steps == 6
    # another cell execution (on another thread: the first cell still runs) steps a new one
    other = Opt()
    got: list[runs_mod.Run] = []

    def probe_cell() -> None:
        r.cell_started("probe", 2)
        got.append(r.at_step(other, lambda: "other"))

    t = threading.Thread(target=probe_cell)
    t.start()
    t.join()
    assert got[0].id == 2 and got[0].reason == "new_optimizer"
    assert events == [("start", 1), ("end", 1), ("start", 2)]
    # an optimizer seen before joins the current run, whichever cell steps it
    assert r.at_step(d_opt, lambda: "d_opt").id == 2


def test_a_sweep_in_one_cell_splits_when_the_old_optimizer_is_gone() -> None:
    r, _, _, _ = registry()
    r.cell_started("sweep", 1)
    opt: Any = Opt()
    assert r.at_step(opt, lambda: "opt").id == 1
    opt = Opt()  # the trial's optimizer replaced: the old one is collected
    gc.collect()
    run = r.at_step(opt, lambda: "opt")
    assert (run.id, run.reason) == (2, "new_optimizer")


def test_no_step_for_the_idle_time_ends_the_run() -> None:
    r, sent, events, clock = registry()
    opt = Opt()
    r.at_step(opt, lambda: "opt")  # no cell: only idleness ends it
    clock.t += RUN_IDLE_S - 1
    assert r.tick() and not r.idle()
    clock.t += 2
    assert r.idle()
    assert not r.tick()  # the watcher ends it
    assert [e for e in events if e[0] != "idle"] == [("start", 1), ("end", 1)]
    assert sent[-1]["current"] is None
    assert r.at_step(opt, lambda: "opt").reason == "idle"
    # a held (paused) loop never goes idle
    r.hold(True)
    clock.t += 60
    assert r.tick() and not r.idle()
    r.hold(False)
    assert r.at_step(opt, lambda: "opt").id == 2


def test_a_pause_in_stepping_inside_the_training_cell_keeps_the_run() -> None:
    """An evaluation pass between epochs: control turns idle (and is told), the run goes
    on until its cell ends."""
    r, _, events, clock = registry()
    opt = Opt()
    r.cell_started("train", 1)
    r.at_step(opt, lambda: "opt")
    assert r.tick() and events[-1] == ("idle", 1)  # stepping: not idle any more
    clock.t += RUN_IDLE_S + 1
    assert r.idle() and r.tick() and r.current is not None
    assert events[-1] == ("idle", 1)  # told again: now idle
    assert r.at_step(opt, lambda: "opt").id == 1  # the next epoch, the same run
    r.cell_ended()
    assert r.current is None and events[-1] == ("end", 1)


def test_log_outside_a_run_starts_one_only_in_a_cell() -> None:
    r, _, _, _ = registry()
    r.at_log()
    assert r.current is None  # no cell: nothing starts
    r.cell_started("logging", 1)
    r.at_log()
    assert r.current is not None and r.current.reason == "first" and r.current.steps == 0
    assert r.idle()  # logging alone is not training: control stays idle
    assert r.at_step(Opt(), lambda: "opt").id == 1  # the cell's first step joins it


def test_a_loop_that_only_logs_keeps_its_run_while_it_logs() -> None:
    """No step boundary, and the cell that started the run is gone (a thread, the bench):
    log() calls keep the run alive; when they stop for the idle time, it ends (a
    regression: every 5 s a new run, and the panel's cards restarted)."""
    r, _, events, clock = registry()
    logged = [0]
    r.activity = lambda: logged[0]
    r._cells[-1] = runs_mod.CellExec(1, None, None)  # a cell runs on another thread
    r.at_log()
    first = r.current
    assert first is not None
    del r._cells[-1]  # the logging goes on after that cell
    for _ in range(5):
        logged[0] += 100
        clock.t += RUN_IDLE_S + 1
        assert r.tick() and r.current is first
    clock.t += RUN_IDLE_S + 1  # the logging stopped
    assert not r.tick() and r.current is None
    assert [e for e in events if e[0] != "idle"] == [("start", first.id), ("end", first.id)]


def test_stream_blocks_per_run_and_the_logged_step_going_backwards() -> None:
    sent: list[tuple[dict[str, Any], list[memoryview]]] = []
    stream = Stream(lambda h, b: sent.append((h, b)))
    r = Runs(lambda m: None, lambda s: None)
    r._ensure_watcher = lambda: None  # type: ignore[method-assign]

    def on_run(event: str, run: runs_mod.Run) -> None:
        if event == "start":
            stream.start_run(run.id)
        else:
            stream.end_run()

    r.on_change(on_run)
    stream.on_no_run = r.at_log
    stream.on_step_back = r.step_backwards
    r.cell_started("c", 1)
    for i in range(5):
        stream.record("loss", float(i), float(10 * i))
    stream.record("acc", 0.5)
    stream.record("acc", 0.6)
    stream.flush()
    assert r.current is not None and r.current.id == 1
    stream.record("loss", 1.0, 0.0)  # the step goes backwards: run 2
    stream.record("acc", 0.1)
    stream.flush()
    assert r.current is not None and (r.current.id, r.current.reason) == (2, "step_backwards")
    blocks, _, _ = stream.snapshot()
    by = {(b["names"][0], b.get("run")): b for b in blocks}
    assert set(by) == {("loss", 1), ("acc", 1), ("loss", 2), ("acc", 2)}
    assert by[("loss", 1)]["id"] != by[("loss", 2)]["id"]
    assert by[("loss", 1)]["count"] == 5 and by[("loss", 2)]["count"] == 1
    # log() without a step counts calls from 1 in each run
    hist = {k: s for k, s in ((("acc", s.run), s) for s in stream.retired.series([]))}
    assert list(hist[("acc", 1)].history.x) == [1.0, 2.0]
    assert list(stream._series["acc"].history.x) == [1.0]
    # series messages carry the run of each block
    runs_sent = {b.get("run") for h, _ in sent for b in h["blocks"]}
    assert runs_sent == {1, 2}


def test_stream_keeps_the_last_five_runs() -> None:
    stream = Stream(lambda h, b: None)
    for run in range(1, 9):
        stream.start_run(run)
        stream.record("loss", 1.0)
        stream.block(["grad/opt/total"], per_run=True).record([1.0], 1.0)
        stream.block(["mem/x"]).record([1.0], float(run))
    stream.flush()
    blocks, _, _ = stream.snapshot()
    runs = sorted({b["run"] for b in blocks if "run" in b})
    assert runs == list(range(9 - limits.KEEP_RUNS, 9))
    assert sum(1 for b in blocks if b["names"] == ["mem/x"] and "run" not in b) == 1


def test_control_state_counts_the_steps_of_the_run_it_names() -> None:
    """A log()-only run after an optimizer's run: the control message names the new run,
    and its step is that run's (none yet), not the last optimizer run's (the panel showed
    "Run 2 · 5 steps" for a run that never stepped)."""
    import torch

    from jupyterlab_torchdbg import log, testing

    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with testing.loaded_extension({"model": model, "opt": opt}) as loaded:
        loaded.shell.events.trigger("pre_run_cell", None)
        for _ in range(5):
            opt.zero_grad()
            model(torch.randn(4, 3)).sum().backward()
            opt.step()
        control = loaded.ext.control
        assert control is not None
        first = control.state()
        assert (first["run"], first["step"]) == (1, 5)
        loaded.end_cell()
        loaded.shell.events.trigger("pre_run_cell", None)
        for i in range(3):
            log(i, loss=1.0 / (i + 1))
        state = control.state()
        assert (state["run"], state["step"]) == (2, 0)
        loaded.end_cell()
