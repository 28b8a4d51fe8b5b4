"""A run as TensorBoard event files: the writer, where it writes, whether it can.

``write_run(directory, series, alerts)`` takes a run as plain data, the shape both the
live stream (``stream/run_points.py``) and the run store's ``load_run`` give:

- ``series``: ``(name, xs, ys)``; each point becomes a scalar of tag ``name``. A step
  series (``loss``, ``grad/...``, ``param/...``) is written with ``global_step`` = its
  x. A memory series (``mem/...``) has Unix-time x: it is written with ``walltime`` = x
  and ``step`` = the point's index in the series (TensorBoard's "relative" and "wall"
  axes then show it in time; its "step" axis only counts samples).
- ``alerts``: alert dicts (``step``, ``layer``, ``message``; ``track`` names the model
  when no layer does); written as one text summary of tag ``alarms``, one plain line
  ``step N · layer · message`` per alarm, in a fenced block so TensorBoard shows the
  lines as they are (its text plugin renders Markdown).

The writer is ``torch.utils.tensorboard.SummaryWriter`` (needs the ``tensorboard``
package). The points of one step go out as one event (one ``Summary`` holding every tag
of that step) rather than one event per ``add_scalar``: a model with hundreds of layers
times thousands of steps is written in seconds. Only the handler imports torch, and only
once the user has (``export/__init__.py``).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ..stream.run_points import WALL_PREFIX

#: The folder under the kernel's working directory that exports go to.
EXPORT_DIR = "torchdbg-runs"
#: Longest notebook stem kept in a folder name.
MAX_STEM = 64

Series = Sequence[tuple[str, Sequence[float], Sequence[float]]]


def alarm_line(alert: Mapping[str, object]) -> str:
    """``step N · layer · message`` (the model's track when no layer is named)."""
    where = alert.get("layer") or alert.get("track") or "-"
    message = " ".join(str(alert.get("message", "")).split())
    return f"step {alert.get('step', '?')} · {where} · {message}"


def write_run(directory: str | Path, series: Series, alerts: Iterable[Mapping[str, object]]) -> int:
    """Write ``series`` and ``alerts`` (see the module docstring) as event files in
    ``directory``; returns the number of scalar points written."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from torch.utils.tensorboard import SummaryWriter

    steps: dict[int, list[Summary.Value]] = defaultdict(list)
    timed: list[tuple[float, int, Summary.Value]] = []
    count = 0
    for name, xs, ys in series:
        wall = name.startswith(WALL_PREFIX)
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            value = Summary.Value(tag=name, simple_value=float(y))
            if wall:
                timed.append((float(x), i, value))
            else:
                steps[int(x)].append(value)
            count += 1
    writer = SummaryWriter(log_dir=str(directory))
    try:
        out = writer.file_writer
        assert out is not None
        for step in sorted(steps):
            out.add_summary(Summary(value=steps[step]), step)
        for t, i, value in sorted(timed, key=lambda e: (e[1], e[0])):
            out.add_summary(Summary(value=[value]), i, walltime=t)
        lines = [alarm_line(a) for a in alerts]
        if lines:
            writer.add_text("alarms", "```\n" + "\n".join(lines) + "\n```", global_step=0)
    finally:
        writer.close()
    return count


def notebook_stem(session_name: str | None) -> str:
    """The notebook's file name without its suffix, made safe for a folder name
    (``JPY_SESSION_NAME`` is the notebook's path); ``kernel`` when there is none."""
    stem = Path(session_name).stem if session_name else ""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._")[:MAX_STEM]
    return stem or "kernel"


def new_run_dir(cwd: Path, session_name: str | None, run: int, now: float | None = None) -> Path:
    """Create and return ``torchdbg-runs/<stem>-run<id>-<yyyymmdd-hhmmss>/`` under
    ``cwd`` (local time of the export; ``-2``, ``-3``... when it exists already)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = f"{notebook_stem(session_name)}-run{run}-{stamp}"
    parent = cwd / EXPORT_DIR
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = parent / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{parent / base} exists (and 998 more)")
