"""Export a run as TensorBoard event files: the ``export_tensorboard`` action (issue #24).

``{run, kernel: null}`` exports this kernel's run ``run``: its series as the stream keeps
them (``stream/run_points.py``: the run's ``log()`` series and gradient/parameter norm
blocks by step, the memory series within the run's start and end by time) and its alarms
(the gradient monitor's alert log, those stamped with the run). ``{run, kernel: <id>}``
exports a run of an earlier kernel of the notebook from the run store, through the
``load_record_run(kernel_id, run) -> (info, series, alerts)`` it is given at attach time
(None: no store in this kernel, refused). Either way ``tensorboard.write_run`` writes
them under ``torchdbg-runs/<notebook stem>-run<id>-<yyyymmdd-hhmmss>/`` in the kernel's
working directory; the ack is ``{path, scalars}`` (path relative to that directory).

Refused (``ActionError`` code ``refused``, shown by the panel as is): tensorboard not
installed, torch not imported by the user (the writer is torch's, and loading never
imports torch), an unknown run, a run with no points.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..action_args import only_keys, schema_number
from ..action_registry import ActionError
from ..capabilities import tensorboard_installed
from ..stream.run_points import run_points
from .tensorboard import new_run_dir, write_run

if TYPE_CHECKING:
    from ..host import Host

__all__ = ["attach", "validate_export"]

#: The run store's reader: ``(kernel_id, run) -> (info, series, alerts)``.
Points = list[tuple[str, list[float], list[float]]]
LoadRecordRun = Callable[
    [str, int], tuple[Mapping[str, object], Points, Sequence[Mapping[str, object]]]
]
_KERNEL_ID = re.compile(r"[0-9a-f]{16}")


def validate_export(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"run", "kernel"})
    if "run" not in args or "kernel" not in args:
        raise ActionError("run and kernel are required (kernel: null for this kernel's run)")
    run = schema_number(args, "export_tensorboard", "run")
    kernel = args["kernel"]
    if kernel is not None and not (isinstance(kernel, str) and _KERNEL_ID.fullmatch(kernel)):
        raise ActionError("kernel must be null or a recorded kernel's id (16 hex digits)")
    return {"run": run, "kernel": kernel}


def attach(
    host: Host,
    alerts: Callable[[], list[dict[str, object]]],
    load_record_run: LoadRecordRun | None = None,
) -> Callable[[], None]:
    """Register ``export_tensorboard``; ``alerts``: this kernel's recent alerts (JSON
    dicts, each with its ``run``). Returns the cleanup."""

    def export(args: dict[str, object]) -> dict[str, object]:
        run, kernel = args["run"], args["kernel"]  # checked by validate_export
        if not isinstance(run, int) or not (kernel is None or isinstance(kernel, str)):
            raise ActionError("run must be an integer, kernel null or a recorded kernel's id")
        if not tensorboard_installed():
            raise ActionError(
                "tensorboard is not installed in the kernel's environment "
                "(pip install tensorboard, then export again)",
                "refused",
            )
        alarms: Sequence[Mapping[str, object]]
        if kernel is None:
            series, alarms = _this_kernels_run(host, alerts, run)
        elif load_record_run is None:
            raise ActionError("no run record is available in this kernel", "refused")
        else:
            try:
                _info, series, alarms = load_record_run(kernel, run)
            except LookupError:
                msg = f"run {run} of kernel {kernel} is not recorded"
                raise ActionError(msg, "refused") from None
        if not any(len(xs) for _, xs, _ in series):
            raise ActionError(f"run {run} has no points to export", "refused")
        if "torch" not in sys.modules:
            raise ActionError(
                "torch is not imported in this kernel (its TensorBoard writer is used): "
                "import torch, then export again",
                "refused",
            )
        cwd = Path.cwd()
        directory = new_run_dir(cwd, os.environ.get("JPY_SESSION_NAME"), run)
        scalars = write_run(directory, series, alarms)
        return {"path": directory.relative_to(cwd).as_posix(), "scalars": scalars}

    return host.actions.register("export_tensorboard", validate_export, export)


def _this_kernels_run(
    host: Host, alerts: Callable[[], list[dict[str, object]]], run: int
) -> tuple[Points, list[dict[str, object]]]:
    found = next((r for r in list(host.runs.runs) if r.id == run), None)
    if found is None:
        raise ActionError(f"run {run} is unknown in this kernel", "refused")
    until = found.end if found.end is not None else time.time()
    series = run_points(host.stream, run, found.start, until)
    return series, [a for a in alerts() if a.get("run") == run]
