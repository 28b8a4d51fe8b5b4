"""Runs: stretches of training kept apart (issue #14, PROTOCOL.md "Runs").

A run starts at a step boundary (every optimizer step and every end-of-backward boundary
passes ``StepBoundary``, which calls ``Runs.at_step`` first) when

- no run is current: none yet (``"first"``), or the last one ended (``"idle"``): the cell
  execution that ran it finished (``cell_ended``, post_run_cell) or no step came for
  ``RUN_IDLE_S`` (while the cell that started it still runs, e.g. an evaluation pass
  between epochs, a pause in stepping only makes control idle: the run goes on);
- an optimizer object never seen stepping before steps in another cell execution than the
  one that started the current run (``"new_optimizer"``); in the same cell execution it
  joins the run (a GAN steps two optimizers), unless every optimizer of the run has been
  garbage collected (a sweep that builds a new optimizer per trial);
- ``log(step=...)`` goes backwards for a series in this run (``"step_backwards"``; the
  stream detects it where points are appended and calls ``step_backwards``).

``log()`` while no run is current starts one only when a cell is executing (``at_log``):
a loop that logs before its first ``optimizer.step()`` (or never steps) gets its run too.

Listeners (``on_change``) hear ``("start", run)``, ``("end", run)`` and ``("idle", run)``
(stepping stopped or resumed within a run) after the registry's lock is released: the
stream gives a new run new blocks, control drops pending changes at an end, the gradient
monitor starts new tracks at their next step. The registry broadcasts ``runs`` on each
start and end and, from a small watcher thread that lives while a run is current, about
every 2 s while steps or alerts change; the same thread ends a run that went idle.
Nothing here raises into training (R11): callers guard, listeners are guarded here.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

#: No step boundary for this long ends the run (and makes control idle).
RUN_IDLE_S = 5.0
#: Runs listed in the ``runs`` message.
MAX_RUNS = 20
#: The ``runs`` message at most this often while a run's numbers change.
RUNS_INTERVAL_S = 2.0
#: How often the watcher thread looks.
WATCH_S = 0.25

Listener = Callable[[str, "Run"], None]


@dataclass
class CellExec:
    """One cell execution (pre_run_cell .. post_run_cell) on one thread."""

    serial: int
    cell_id: str | None
    execution_count: int | None


@dataclass
class Run:
    id: int
    start: float
    reason: str
    cell: CellExec | None
    end: float | None = None
    optimizers: list[str] = field(default_factory=list)
    steps: int = 0
    alerts: int = 0
    #: monotonic time of the last step boundary (or log() for a run without steps).
    last_active: float = 0.0
    last_step: float | None = None
    opt_refs: list[weakref.ref[object]] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "start": self.start,
            "end": self.end,
            "reason": self.reason,
            "cell_id": self.cell.cell_id if self.cell else None,
            "execution_count": self.cell.execution_count if self.cell else None,
            "optimizers": list(self.optimizers),
            "steps": self.steps,
            "alerts": self.alerts,
        }


class Runs:
    """The run registry (see the module docstring)."""

    def __init__(
        self,
        broadcast: Callable[[Mapping[str, object]], None],
        on_error: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._broadcast = broadcast
        self._on_error = on_error
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self.runs: deque[Run] = deque(maxlen=MAX_RUNS)
        self.current: Run | None = None
        self._next_id = 1
        self._cells: dict[int, CellExec] = {}
        self._cell_serial = 0
        #: Optimizer objects (and hand-updated models) ever seen stepping.
        self._seen: weakref.WeakSet[object] = weakref.WeakSet()
        #: Hand-updated models' boundaries in this run; optimizers handed a counted step.
        self._source_steps: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        self._counted: weakref.WeakSet[object] = weakref.WeakSet()
        self._listeners: list[Listener] = []
        #: While True (a paused loop), the current run never goes idle.
        self.held = False
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()
        self._sent = (0, 0, 0)  # (run id, steps, alerts) of the last periodic message
        self._last_sent = -1e18
        self._idle_seen = True
        #: A counter of log() calls (the stream's): one that moved keeps the run alive.
        self.activity: Callable[[], int] | None = None
        self._activity_seen = -1

    # --- queries ------------------------------------------------------------------

    @property
    def current_id(self) -> int | None:
        run = self.current
        return None if run is None else run.id

    @property
    def last(self) -> Run | None:
        """The current run, else the last one."""
        return self.current or (self.runs[-1] if self.runs else None)

    def idle(self) -> bool:
        """Nothing is training: no current run, or no step boundary for RUN_IDLE_S
        (never while a loop is held paused)."""
        run = self.current
        if run is None:
            return True
        if self.held:
            return False
        return run.last_step is None or self._clock() - run.last_step > RUN_IDLE_S

    def message(self) -> dict[str, object]:
        with self._lock:
            return {
                "method": "runs",
                "current": self.current_id,
                "runs": [r.to_json() for r in self.runs],
            }

    def on_change(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    # --- cells (the kernel's threads) -------------------------------------------------

    def cell_started(self, cell_id: str | None, execution_count: int | None) -> None:
        with self._lock:
            self._cell_serial += 1
            self._cells[threading.get_ident()] = CellExec(
                self._cell_serial, cell_id, execution_count
            )

    def cell_ended(self) -> None:
        """post_run_cell: the run this cell execution started ends."""
        with self._lock:
            cell = self._cells.pop(threading.get_ident(), None)
            run = self.current
            ended = run if run is not None and cell is not None and run.cell is cell else None
            if ended is not None:
                self._end(ended)
        if ended is not None:
            self._announce("end", ended)

    def _cell_here(self) -> CellExec | None:
        """The cell execution this thread runs, else the latest one still running."""
        cell = self._cells.get(threading.get_ident())
        if cell is None and self._cells:
            cell = max(self._cells.values(), key=lambda c: c.serial)
        return cell

    # --- the step boundary and log() (training threads) -------------------------------

    def at_step(self, optimizer: object, name: Callable[[], str]) -> Run:
        """A step boundary of ``optimizer``; returns the run it belongs to (maybe new)."""
        now = self._clock()
        ended: Run | None = None
        started: Run | None = None
        with self._lock:
            run = self.current
            if run is not None and self._went_idle(run, now):
                ended = run
                self._end(run)
                run = None
            new_opt = optimizer not in self._seen
            cell = self._cell_here()
            if run is None:
                started = run = self._start("idle" if self.runs else "first", cell, now)
            elif new_opt and (
                run.cell is not cell or (all(r() is None for r in run.opt_refs) and run.opt_refs)
            ):
                ended = run
                self._end(run)
                started = run = self._start("new_optimizer", cell, now)
            if new_opt:
                self._seen.add(optimizer)
            if new_opt or not any(r() is optimizer for r in run.opt_refs):
                run.opt_refs = [r for r in run.opt_refs if r() is not None]
                run.opt_refs.append(weakref.ref(optimizer))
                shown = name()
                if shown not in run.optimizers:
                    run.optimizers.append(shown)
            if optimizer in self._counted:
                self._counted.discard(optimizer)  # handed over: this step was counted
            else:
                run.steps += 1
            if getattr(optimizer, "boundary", None) == "end_of_backward":  # for hand_over
                self._source_steps[optimizer] = self._source_steps.get(optimizer, 0) + 1
            run.last_active = run.last_step = now
        if ended is not None:
            self._announce("end", ended)
        if started is not None:
            self._announce("start", started)
        return run

    def hand_over(self, source: object, optimizer: object, name: Callable[[], str]) -> bool:
        """An optimizer takes over a hand-updated model at its first step (the pass the
        model's boundary just counted is the one it steps). If that pass is all the
        source did in the current run, the optimizer takes its place and name, joining
        without a new run or a second count of the step: True (a phantom source)."""
        with self._lock:
            run, steps = self.current, self._source_steps.pop(source, 0)
            if run is None or steps != 1 or not any(r() is source for r in run.opt_refs):
                return False
            run.opt_refs = [r for r in run.opt_refs if r() not in (source, None)]
            run.opt_refs.append(weakref.ref(optimizer))
            shown, was = name(), name_of(source, {})
            run.optimizers = list(dict.fromkeys(shown if n == was else n for n in run.optimizers))
            if shown not in run.optimizers:
                run.optimizers.append(shown)
            self._seen.add(optimizer)
            self._counted.add(optimizer)
            return True

    def at_log(self) -> None:
        """log() while no run is current: start one if a cell is executing."""
        with self._lock:
            if self.current is not None:
                self.current.last_active = self._clock()
                return
            cell = self._cell_here()
            if cell is None:
                return
            run = self._start("idle" if self.runs else "first", cell, self._clock())
        self._announce("start", run)

    def step_backwards(self) -> None:
        """A logged step went backwards: a new run."""
        with self._lock:
            ended = self.current
            if ended is not None:
                self._end(ended)
            run = self._start("step_backwards", self._cell_here(), self._clock())
        if ended is not None:
            self._announce("end", ended)
        self._announce("start", run)

    def hold(self, held: bool) -> None:
        """A loop is held paused (never idle meanwhile); released: it counts as a step
        now, so the pause's length does not end the run."""
        with self._lock:
            self.held = held
            run = self.current
            if not held and run is not None:
                run.last_active = run.last_step = self._clock()

    def count_alerts(self, n: int) -> None:
        run = self.last
        if run is not None and n > 0:
            run.alerts += n

    # --- internals --------------------------------------------------------------------

    def _went_idle(self, run: Run, now: float) -> bool:
        """No step for RUN_IDLE_S ends a run, unless the cell execution that started it
        still runs (an evaluation pass between epochs does not split the run; control is
        idle meanwhile) or the loop is held paused. Under the lock."""
        if self.held or now - run.last_active <= RUN_IDLE_S:
            return False
        activity = self.activity() if self.activity is not None else -1
        if activity != self._activity_seen:  # log() was called: a loop that only logs
            self._activity_seen = activity
            run.last_active = now
            return False
        return run.cell is None or all(c is not run.cell for c in self._cells.values())

    def _start(self, reason: str, cell: CellExec | None, now: float) -> Run:
        run = Run(self._next_id, self._wall(), reason, cell, last_active=now)
        self._source_steps = weakref.WeakKeyDictionary()
        self._counted = weakref.WeakSet()
        self._activity_seen = self.activity() if self.activity is not None else -1
        self._next_id += 1
        self.runs.append(run)
        self.current = run
        return run

    def _end(self, run: Run) -> None:
        """Under the lock."""
        if run.end is None:
            run.end = self._wall()
        if self.current is run:
            self.current = None

    def _announce(self, event: str, run: Run) -> None:
        for listener in list(self._listeners):
            try:
                listener(event, run)
            except Exception:
                self._on_error("runs:listener")
        self.send()
        if event == "start":
            self._ensure_watcher()

    def send(self) -> None:
        try:
            msg = self.message()
            run = self.last
            self._sent = (run.id, run.steps, run.alerts) if run else (0, 0, 0)
            self._last_sent = self._clock()
            self._broadcast(msg)
        except Exception:
            self._on_error("runs:send")

    def _ensure_watcher(self) -> None:
        thread = self._watcher
        if thread is not None and thread.is_alive():
            return
        self._stop.clear()
        thread = threading.Thread(target=self._watch, name="torchdbg-runs", daemon=True)
        self._watcher = thread
        thread.start()

    def _watch(self) -> None:
        """End a run that went idle; send ``runs`` every ~2 s while its numbers change."""
        while not self._stop.wait(WATCH_S):
            try:
                if not self.tick():
                    return
            except Exception:
                self._on_error("runs:watch")

    def tick(self) -> bool:
        """One look of the watcher; False when no run is current (the thread ends)."""
        now = self._clock()
        ended = None
        with self._lock:
            run = self.current
            if run is None:
                return False
            if self._went_idle(run, now):
                ended = run
                self._end(run)
        if ended is not None:
            self._announce("end", ended)
            return False
        idle = self.idle()
        if idle != self._idle_seen:  # stepping stopped (or resumed) inside the run's cell
            self._idle_seen = idle
            self._announce("idle", run)
        if (run.id, run.steps, run.alerts) != self._sent and (
            now - self._last_sent >= RUNS_INTERVAL_S
        ):
            self.send()
        return True

    def close(self) -> None:
        self._stop.set()
        self._listeners.clear()


def name_of(obj: object, ns: Mapping[str, object]) -> str:
    """The user's variable name for an optimizer (or a hand-updated model's source)."""
    shown = getattr(obj, "name", None)
    if isinstance(shown, str) and not hasattr(obj, "step"):
        return shown  # a ModelSource: the model's name
    for k, v in list(ns.items()):
        if v is obj and not k.startswith("_"):
            return k
    return type(obj).__name__
