"""Where ipykernel sends the panel's messages: the subshell the panel chose.

ipykernel >= 7 (kernel subshells) decides which subshell handles a comm's *incoming*
messages, and by default picks the subshell that last *published* on that comm. Our
broadcasts come from the training thread (the main shell), so the panel's next action
(e.g. Resume) would go to the busy main shell and wait for the cell to end: a paused loop
could never be resumed. The panel chooses its subshell itself (JupyterLab opens the comm
on the main shell before its subshell exists, then sends every action over the subshell),
so the right route is always the one the message's own header names.

There is no public way to choose this, so this module is the one place that writes
ipykernel's private comm attributes (``tests/test_control_first_action.py`` fails if
ipykernel's routing changes under us):

- ipykernel releases that ask the comm (``comm._reply_subshell_for(data, subshell_id)``):
  at open, that method is replaced on the comm instance by one answering the header's own
  subshell. Once, with no window: an earlier per-send repair let an action slip to the
  busy main shell between a broadcast and the repair.
- earlier 7.x releases that read ``comm._reply_subshell_id``: after each send, the route
  the panel last used is written back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .comm_types import Comm, JupyterMsg


def _header_subshell(data: object, subshell_id: str | None) -> str | None:
    """A comm's reply route (ipykernel's ``_reply_subshell_for``): the message's own."""
    return subshell_id


class SubshellRoutes:
    """The subshell each comm's panel talks to us on, and keeping ipykernel to it."""

    def __init__(self) -> None:
        #: comm_id -> the subshell of the panel's last message (None: the main shell).
        self._routes: dict[str, str | None] = {}

    def note(self, comm: Comm, msg: JupyterMsg) -> None:
        """Remember the subshell this comm's panel talks to us on (None: main shell)."""
        header = msg.get("header") or {}
        subshell = header.get("subshell_id") if isinstance(header, Mapping) else None
        self._routes[getattr(comm, "comm_id", "")] = subshell if isinstance(subshell, str) else None

    def forget(self, comm_id: str) -> None:
        self._routes.pop(comm_id, None)

    @staticmethod
    def route_as_sent(comm: Comm) -> None:
        """At open: every message the panel sends goes to the subshell its header names."""
        if callable(getattr(type(comm), "_reply_subshell_for", None)):
            setattr(comm, "_reply_subshell_for", _header_subshell)  # noqa: B010 (private)

    def keep(self, comm: Comm) -> None:
        """After a send (releases without ``_reply_subshell_for``): restore the panel's
        route, which the send replaced with the sending thread's."""
        lock = getattr(comm, "_reply_subshell_lock", None)
        if lock is None or comm.__dict__.get("_reply_subshell_for") is _header_subshell:
            return
        comm_id = getattr(comm, "comm_id", "")
        with lock:
            if comm_id in self._routes:
                setattr(comm, "_reply_subshell_id", self._routes[comm_id])  # noqa: B010
