"""A worker process's step boundary: what torch's step hooks call in a rank.

``HOOKS`` (kernel/step_boundary.py, the one owner of torch's step hooks) calls
``Worker.before_step`` / ``after_step`` in a worker process, as it calls the kernel's
``StepBoundary`` in the kernel. In the pre-hook (after DDP's all-reduce), on the training
thread:

1. count the step (the primary optimizer: the first one seen that is still alive) and
   note its time and interval;
2. at a sampled step (``step % stride == 0``, the stride a power of two: 1, doubled while
   the read costs more than 2% of the step, so the ranks' samples keep meeting), read the
   total and per-layer gradient norms and the memory (reader.py); at the first
   non-finite one, diagnose its cause from this rank's own kept batch (rank_signals.py;
   the agent's thread runs the explosion / vanishing detector on the reads);
3. the agreed actions due at this step (agreed.py): clip, lr, pause, in that order;
   clipping at every step while on;
4. hold here while paused.

Lazy: nothing but this object exists until the first step, which starts the agent
(agent.py: one thread, one socket). Never raises into ``step()`` (errors are counted
here); only the user's KeyboardInterrupt goes through while paused. No tensor outlives a
step; optimizers and modules are held by weakref (reader.py).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ...kernel.backward_boundary import ModelSource
from ...kernel.grads.loop_clip import learning_rate
from ..wire.messages import Row
from ..wire.packed import layout_of, pack
from ..wire.transport import finite_or_special
from . import loader_errors
from .agent import Agent
from .agreed import Agreements
from .manual import ManualModels
from .rank_signals import RankSignals
from .reader import Reader, memory

if TYPE_CHECKING:
    import torch

    from ...kernel.grads.naming import Stepped
    from ..wire.messages import Layers, Signal
    from .reader import Read

#: Seconds without a step before a heartbeat carries the stack (the kernel's config).
DEFAULT_HANG_S = 10.0
#: Share of the step time a read may cost before the stride doubles.
READ_BUDGET = 0.02
MAX_STRIDE = 1024
#: Rows kept while the agent cannot send (the oldest dropped first).
MAX_PENDING_ROWS = 2000


class _Row(Row, total=False):
    """A step row while its norms are on their way from the device (never sent so)."""

    _pending: bool


class Worker:
    """This process's rank boundary (created when it becomes a worker; see activation.py)."""

    def __init__(self, address: str, key: str) -> None:
        self.address = address
        self.key = key
        self.pid = os.getpid()
        self.errors: Counter[str] = Counter()
        self.agreed = Agreements(self._post)
        self.reader = Reader()
        self.agent: Agent | None = None
        self._agent_lock = threading.Lock()
        self.stride = 1
        #: A large world's kernel asks for a step row only every so many steps (config).
        self.row_stride = 1
        self._over_budget = 0
        self._reads = 0
        self.hang_s = DEFAULT_HANG_S
        #: The thread that steps the primary optimizer (its stack is sampled).
        self.train_tid: int | None = None
        self._last_step: float | None = None  # perf_counter at the last primary step
        self._primary: weakref.ref[Stepped] | None = None
        self._rows: deque[_Row] = deque(maxlen=MAX_PENDING_ROWS)
        self._layers: Layers | None = None
        self._layout: tuple[list[str], str] = ([], layout_of([]))  # (names, their layout)
        #: Sampled rows whose norms are still being copied from the device.
        self._in_flight: deque[tuple[_Row, Read]] = deque(maxlen=MAX_PENDING_ROWS)
        self.mem_kind = "host"
        #: An uncaught exception ended (or will end) this process.
        self.failed = False
        self._reported: deque[int] = deque(maxlen=64)
        #: A loop without an optimizer: its model's backward passes are the steps.
        self.manual = ManualModels(self.at_backward_end, self._count_error)
        #: Non-finite (diagnosed from this rank's own batch), explosion and vanishing.
        self.signals = RankSignals(self._count_error)

    def _count_error(self, where: str) -> None:
        self.errors[where] += 1

    def torch_ready(self) -> None:
        """torch is imported and the step hooks call this worker: also watch for a loop
        that updates its weights by hand (manual.py), and note which sample a dataset
        fails on if this process is a DataLoader worker (loader_errors.py)."""
        try:
            self.manual.install()
        except Exception:
            self.errors["manual:install"] += 1
        loader_errors.install()

    # --- torch's step hooks (training thread) -------------------------------------------

    def before_step(
        self, optimizer: torch.optim.Optimizer, args: object = None, kwargs: object = None
    ) -> None:
        if os.getpid() != self.pid:
            return  # inherited across a fork that made no worker of its own
        again = self.manual.stepped(optimizer) if self.manual.watching else False
        self._boundary(optimizer, again)

    def at_backward_end(self, source: ModelSource) -> None:
        """The end of a backward pass of the model a loop updates by hand (manual.py):
        the rank's step, as an optimizer's pre-hook would be."""
        if os.getpid() != self.pid or not self.manual.counts():
            return
        self._boundary(source)

    def _boundary(self, optimizer: Stepped, again: bool = False) -> None:
        """One step of the rank (an optimizer, or a ``ModelSource``): record, settle the
        agreed actions due, clip, hold while paused. ``again``: the optimizer's first
        step ends the iteration whose backward pass was this step already (manual.py):
        it takes the step over without counting or recording it twice."""
        primary = False
        try:
            primary = self._is_primary(optimizer)
            step, due = self.agreed.begin_step(optimizer, primary and not again)
            if primary and not again:
                self._record(optimizer, step)
            self.agreed.settle(due, optimizer)
            self.agreed.clip_now(optimizer, step)
        except Exception:
            self.errors["step"] += 1
            if primary:
                # An object whose step cannot be read is not the rank's step: the next
                # optimizer to step takes over (it may stay alive, held by a traceback).
                self._primary = None
            primary = False
        finally:
            self.agreed.read = None  # this step's read (its device row) ends with the step
        if primary:
            self.agreed.hold()

    def after_step(
        self, optimizer: torch.optim.Optimizer, args: object = None, kwargs: object = None
    ) -> None:
        return None

    def forked(self) -> None:
        """A forked child replaced this (the parent's) worker: it is never used again."""
        return None

    def _is_primary(self, optimizer: Stepped) -> bool:
        current = self._primary() if self._primary is not None else None
        if isinstance(current, ModelSource) and not isinstance(optimizer, ModelSource):
            current = None  # an optimizer took the model over: it is the rank's step now
        if current is None:
            self.agreed.manual = isinstance(optimizer, ModelSource)
            try:
                self._primary = weakref.ref(optimizer)
            except TypeError:
                return True
            return True
        return current is optimizer

    def _record(self, optimizer: Stepped, step: int) -> None:
        now = time.perf_counter()
        dt = now - self._last_step if self._last_step is not None else None
        self._last_step = now
        self.train_tid = threading.get_ident()
        self.ensure_agent()
        row: _Row = {
            "step": step,
            "t": time.time(),
            "dt": dt,
            "norm": None,
            "mem": None,
            "mem_kind": self.mem_kind,
        }
        sampled = step % max(self.stride, self.row_stride) == 0
        if not sampled and self.row_stride > 1 and self.agreed.clip is None:
            return  # a large world: a row every row_stride steps (the heartbeat has the step)
        # while clipping, every step is read: the clip reuses the read (agreed.py)
        if sampled or self.agreed.clip is not None:
            t0 = time.perf_counter()
            frame = sys._getframe()
            read = self.reader.read(optimizer, frame)
            self.agreed.read = (optimizer, step, read)
            if read.module is not None:
                self.signals.watch(read.module, read.module_name, frame)
            del frame
            finding = None
            if read.pending is None:
                finding = self.signals.at_read(step, read)  # (the diagnosis: once per alarm)
            if self.signals.wants_weights(step, now):
                weights = self.reader.weights(optimizer, None)
                if weights is not None:
                    self.signals.at_weights(step, now, weights, learning_rate(optimizer))
            if finding is not None:
                row["nonfinite"] = finding
            mem, self.mem_kind = memory(optimizer)
            cost = time.perf_counter() - t0
            if finding is not None:
                cost = 0.0  # a diagnosis is paid once: it says nothing of the read's cost
            row["mem"], row["mem_kind"] = mem, self.mem_kind
            if read.replicas is not None:
                row["replicas"] = read.replicas  # the norm is of this rank's shards
            if read.pending is None:
                self._with_norms(row, read)
            else:  # on its way from the device: the agent's thread finishes the row
                row["_pending"] = True
                self._in_flight.append((row, read))
            self._adapt(cost, dt)
        self._rows.append(row)

    def _with_norms(self, row: _Row, read: Read) -> None:
        row.pop("_pending", None)
        row["norm"] = None if read.norm is None else finite_or_special(read.norm)
        if read.names is not None and read.layers is not None:
            # one string, not hundreds of numbers: the kernel reads it only when it
            # needs the layers (wire/packed.py)
            names, layout = self._layout
            if read.names != names:  # (the same strings while the model is: cheap)
                names, layout = list(read.names), layout_of(read.names)
                self._layout = (names, layout)
            self._layers = {
                "step": row["step"],
                "layout": layout,
                "names": names,
                "packed": pack(read.layers),
            }

    def _land(self) -> None:
        """(The agent's thread.) Rows whose norms were still on the device: wait for
        their copies (this thread waits, never the training thread), then finish them
        and hand the reads to the detector (the at-step diagnosis needs the host value
        at the step, so on an accelerator a non-finite step is reported, undiagnosed,
        as the kernel does without a per-step sync)."""
        while self._in_flight:
            row, read = self._in_flight.popleft()
            try:
                pending = read.pending
                assert pending is not None  # (only rows in flight are here)
                read.resolve(pending.wait())
                read.norms, read.params = None, []  # no tensor outlives the read
                self._with_norms(row, read)
                self.signals.at_read(row["step"], read, diagnose=False)
            except Exception:
                self.errors["land"] += 1

    def _adapt(self, cost: float, dt: float | None) -> None:
        """Double the stride after three reads in a row over budget (the first read,
        which finds the model, is not counted)."""
        self._reads += 1
        if dt is None or self._reads < 2:
            return
        if cost > READ_BUDGET * dt * self.stride:
            self._over_budget += 1
            if self._over_budget >= 3 and self.stride < MAX_STRIDE:
                self.stride *= 2
                self._over_budget = 0
        else:
            self._over_budget = 0

    # --- the agent ----------------------------------------------------------------------

    def ensure_agent(self) -> Agent | None:
        """The agent, started on first use in this process."""
        agent = self.agent
        if agent is not None:
            return agent
        with self._agent_lock:
            if self.agent is None and os.getpid() == self.pid:
                agent = Agent(self)
                agent.start()
                self.agent = agent
            return self.agent

    def _post(self, msg_type: str, content: Mapping[str, object]) -> None:
        agent = self.agent
        if agent is not None:
            agent.post(msg_type, content)

    def take_rows(self, limit: int) -> list[Row]:
        self._land()
        rows: list[Row] = []
        try:
            while len(rows) < limit:
                row = self._rows.popleft()
                if "_pending" in row:  # sampled after the _land above: land it too
                    self._land()
                    row.pop("_pending", None)
                rows.append(row)
        except IndexError:
            pass
        return rows

    def take_signals(self) -> tuple[list[Signal], int]:
        """(The agent's thread.) Explosion / vanishing alerts of the reads sampled since
        the last call, and the last step judged."""
        signals = self.signals.judge(self.agreed.clip is not None)
        return signals, self.signals.checked

    def take_layers(self) -> Layers | None:
        layers, self._layers = self._layers, None
        return layers

    def since_step(self) -> float | None:
        last = self._last_step
        return None if last is None else time.perf_counter() - last

    # --- the end ------------------------------------------------------------------------

    def report(self, exc: BaseException) -> None:
        """Send ``exc`` to the kernel (and wait, bounded, until it is sent). Never raises."""
        try:
            if id(exc) in self._reported:
                return
            self._reported.append(id(exc))
            content = _exception_content(exc)
            content["step"] = self.agreed.step
            agent = self.ensure_agent()
            if agent is not None:
                agent.send_now("exception", content)
        except Exception:
            self.errors["report"] += 1

    def close(self, state: str) -> None:
        """``bye`` and the last rows; the agent's thread ends. Never raises."""
        try:
            agent = self.agent
            if agent is not None:
                agent.close(state)
        except Exception:
            self.errors["close"] += 1
        try:
            self.signals.remove()
        except Exception:
            self.errors["close"] += 1


def _exception_content(exc: BaseException) -> dict[str, object]:
    """The panel's exception body (kernel/exceptions/capture, no shell), or a minimal
    one if the capture fails."""
    try:
        from ...kernel.exceptions.capture import capture

        return dict(capture(exc))
    except Exception:
        return {
            "exception": {
                "type": type(exc).__name__,
                "module": type(exc).__module__,
                "message": str(exc)[:2000],
            },
            "frames": [],
            "diagnosis": None,
        }
