"""Actions that must run on the training thread: a queue drained at the next safe point.

``save_checkpoint`` (memory) while a cell trains must not read the weights mid-step (R12),
and ``replay_step`` (grads) must not run a forward + backward of the model while the
training thread is inside its own (R34): the action's handler (on a subshell thread)
queues the job and waits; the training thread runs it at its next optimizer step
boundary, or the cell's end runs it. A job nobody picks up in time is withdrawn and
refused with the reason. Kernel-level so that each feature keeps its own queue without
importing another feature.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

from .action_registry import ActionError

#: What a job's function returns (``run_at_next`` hands it back).
JobT = TypeVar("JobT")


@dataclass
class _Job:
    fn: Callable[[], object]
    done: threading.Event = field(default_factory=threading.Event)
    result: object = None
    error: BaseException | None = None


class SafePointJobs:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: list[_Job] = []

    @property
    def waiting(self) -> bool:
        return bool(self._jobs)

    def run_at_next(self, fn: Callable[[], JobT], timeout: float) -> JobT:
        """Queue ``fn`` for the next safe point and wait for its result (or its error)."""
        job = _Job(fn)
        with self._lock:
            self._jobs.append(job)
        if not job.done.wait(timeout):
            with self._lock:
                pending = job in self._jobs
                if pending:
                    self._jobs.remove(job)
            if pending:
                raise ActionError(
                    f"the running cell reached no optimizer step in {timeout:.0f} s; "
                    "try again when it ends",
                    "refused",
                )
            job.done.wait()  # it is running right now: wait for it
        if job.error is not None:
            raise job.error
        return cast("JobT", job.result)  # what ``fn`` returned

    def run(self) -> None:
        """Run every queued job now (on the training thread, or at the cell's end)."""
        with self._lock:
            jobs, self._jobs = self._jobs, []
        for job in jobs:
            try:
                job.result = job.fn()
            except BaseException as e:  # handed to the waiting action, never raised here
                job.error = e
            finally:
                job.done.set()
