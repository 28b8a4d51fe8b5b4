"""Keep JupyterLab's kernel status "busy" while a cell runs and the panel talks to us.

The cause (upstream): JupyterLab's ``KernelConnection`` sets the kernel's status from
every iopub ``status`` message, whatever request it answers; only parent message types
listed in the server's ``untracked_message_types`` are skipped, and ``comm_msg`` is not
one of them (jupyterlab/jupyterlab#10701 is the same flaw for the control channel). With
ipykernel >= 7 the panel's actions are ``comm_msg`` requests handled on a kernel subshell
(so they work while a cell trains), and each one publishes ``busy`` then ``idle``. The
notebook then said "Idle" while its cell was still training, and while paused.

The workaround, on our side: right after a request of ours has been answered on a
subshell, while the main shell runs a cell, publish the main shell's ``busy`` again (the
same message ipykernel sent when the cell started: parent = the cell's execute_request).
JupyterLab's last status is then true again. It is queued behind the subshell's ``idle``
with ``loop.call_soon`` on the subshell's event loop: ipykernel's ``dispatch_shell``
publishes that ``idle`` synchronously after our handler returns, before the loop runs
anything else. A cell's end (IPython's ``post_run_cell``, which comes before ipykernel's
own ``idle`` for the cell) takes the same lock, so ``busy`` is never sent after the cell's
``idle``. One message per panel request, none per step.

Only public kernel attributes are used (``session``, ``iopub_socket``, ``ident``,
``get_parent``); the status message is built the way ipykernel's ``_publish_status`` does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Protocol, cast


class _Session(Protocol):
    def send(
        self,
        stream: object,
        msg_type: str,
        content: dict[str, object],
        *,
        parent: object,
        ident: bytes,
    ) -> object: ...


class _Kernel(Protocol):
    """ipykernel's kernel, as far as re-publishing a status goes."""

    session: _Session
    iopub_socket: object
    ident: str


class MainShellBusy:
    """Re-publishes the main shell's ``busy`` after our subshell replies (see module doc)."""

    def __init__(self, kernel: object, on_error: Callable[[str], None]) -> None:
        self._kernel = kernel
        self._on_error = on_error
        self._lock = threading.Lock()
        #: The header of the execute_request the main shell runs now; None when idle.
        self._parent: dict[str, object] | None = None
        #: How many ``busy`` were re-published (for tests and the stats).
        self.reasserted = 0

    def cell_started(self) -> None:
        """A cell starts; remembered only for the main shell (the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return
        get_parent = getattr(self._kernel, "get_parent", None)
        parent = get_parent("shell") if callable(get_parent) else None
        if not isinstance(parent, dict) or parent.get("msg_type") != "execute_request":
            return
        with self._lock:
            self._parent = parent

    def cell_ended(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        with self._lock:
            self._parent = None

    def after_request(self) -> None:
        """A panel request was answered on this thread: if it is a subshell's while the
        main shell runs a cell, re-assert ``busy`` once the subshell has said ``idle``."""
        if threading.current_thread() is threading.main_thread() or self._parent is None:
            return  # the main shell's own status is right
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not inside ipykernel's dispatch: nobody published a status for us
        loop.call_soon(self._reassert)

    def _reassert(self) -> None:
        try:
            with self._lock:
                parent = self._parent
                if parent is None:
                    return  # the cell ended meanwhile: its own idle is the truth
                kernel = cast("_Kernel", self._kernel)  # an ipykernel kernel (get_parent seen)
                kernel.session.send(
                    kernel.iopub_socket,
                    "status",
                    {"execution_state": "busy"},
                    parent=parent,
                    ident=f"kernel.{kernel.ident}.status".encode(),
                )
                self.reasserted += 1
        except Exception:
            self._on_error("shell_status")
