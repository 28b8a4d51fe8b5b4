"""Wiring the ranks into the loaded extension (``extension.py`` calls ``attach_to``).

On load: the endpoint binds (an owner-only ipc socket, or TCP on ``$TORCHDBG_LISTEN``) and is
published to every process the notebook starts (``worker_env.install``: the env vars, the
boot dir on ``PYTHONPATH``, the fork handler, the mp.spawn patch); the hub hears the exit
codes torch's join reaps (``mp_wrap.exit_listener``) and gets the endpoint's messages,
registers the ``ranks_*`` actions and its snapshot part, and gives the extension its
cell-event handlers (``hub.cell_events``: the cell that starts a job is the one its
workers' exceptions name). The extension is the one owner of IPython's cell events and
calls them in its own order (kernel/extension.py).
A bind that fails leaves the feature off (``endpoint.transport: "off"``), counted, and
says why on stderr (the ``%load_ext`` cell's output): a bad ``TORCHDBG_LISTEN`` names the
value and what to set instead (R55).

On unload, in this order: paused workers are released (``resume``), the environment is
put back, the endpoint closes, the hub's thread ends, the actions and parts go.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from .aggregator import RankHub
from .listen import ListenError

if TYPE_CHECKING:
    from ...kernel.host import Host


def attach_to(host: Host) -> tuple[RankHub, Callable[[], None]]:
    """Create the hub and its endpoint; returns the hub and its cleanup. Never raises."""
    hub = RankHub(host.hub.broadcast, host.count_error, host.session_id)
    cleanups: list[Callable[[], None]] = []
    cell_setter: Callable[[str | None], None] | None = None
    try:
        from ..worker import mp_wrap

        # torch's join reaps the ranks the notebook starts: their exit codes (R56)
        mp_wrap.exit_listener = hub.process_exited

        def stop_listening() -> None:
            if mp_wrap.exit_listener == hub.process_exited:
                mp_wrap.exit_listener = None

        cleanups.append(stop_listening)
        from .endpoint import Endpoint
        from .worker_env import install, set_cell, torch_imported

        endpoint = Endpoint(hub.on_message)
        hub.endpoint = endpoint
        hub.transport = endpoint.transport
        cleanups.append(endpoint.close)
        # torch's import is watched by the extension, which tells the hub (torch_imported)
        cleanups.append(
            install(endpoint.address, endpoint.key, watch_torch=False, job=endpoint.job)
        )
        hub.on_torch = torch_imported
        cell_setter = set_cell
    except ListenError as e:
        host.count_error("ranks:listen")
        _say(str(e))
    except Exception as e:
        host.count_error("ranks:endpoint")
        _say(f"the ranks endpoint could not start ({e}). Multi-process monitoring is off.")

    def cleanup() -> None:
        for fn in reversed(cleanups):
            try:
                fn()
            except Exception:
                host.count_error("ranks:unload")
        cleanups.clear()

    try:
        _wire(host, hub, cleanups, cell_setter)
    except Exception:
        host.count_error("ranks:attach")
    return hub, cleanup


def _say(text: str) -> None:
    """Tell the user (stderr: the ``%load_ext`` cell's output, else the kernel's log)."""
    try:
        print(f"jupyterlab_torchdbg: {text}", file=sys.stderr)
    except Exception:
        pass


def _wire(
    host: Host,
    hub: RankHub,
    cleanups: list[Callable[[], None]],
    cell_setter: Callable[[str | None], None] | None,
) -> None:
    """The actions, the snapshot part, the cell events, the unload order."""
    cleanups.append(hub.actions.register(host.actions))
    cleanups.append(host.hub.add_snapshot_part(hub.snapshot_messages))

    def pre_run_cell(info: object = None) -> None:
        try:
            cell_id = getattr(info, "cell_id", None)
            cell_id = cell_id if isinstance(cell_id, str) else None
            # IPython counts the cell before pre_run_cell: its display hook knows the In[n]
            count = getattr(getattr(host.shell, "displayhook", None), "prompt_count", None)
            if not isinstance(count, int):
                count = getattr(host.shell, "execution_count", None)
            hub.cell = (cell_id, count if isinstance(count, int) else None)
            if cell_setter is not None:
                cell_setter(cell_id)
        except Exception:
            host.count_error("ranks:pre_run_cell")

    def post_run_cell(result: object = None) -> None:
        # called after the exceptions feature's post_run_cell: the cell's exception is out
        try:
            exc = getattr(result, "error_in_exec", None)
            if exc is not None:
                hub.cell_failed(exc)
        except Exception:
            host.count_error("ranks:post_run_cell")

    hub.cell_events = (pre_run_cell, post_run_cell)

    def forget_cells() -> None:
        hub.cell_events = None

    cleanups.append(forget_cells)

    def release_paused() -> None:
        for worker in hub.paused_workers():
            hub.send(worker, "resume", {})

    cleanups.append(hub.close)
    cleanups.append(release_paused)  # runs first (reversed): before the endpoint closes
