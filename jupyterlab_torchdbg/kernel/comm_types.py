"""The comm hub's view of ipykernel's comms: the ``Comm`` and ``CommManager`` protocols.

Kept apart from ``comms.py`` so that ``subshell_routes.py`` (which ``comms.py`` imports)
can name them too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

#: One message to a panel (a generated TypedDict of ``protocol/messages.py`` or a dict).
Message = Mapping[str, object]
Buffers = list[memoryview]
#: A Jupyter message as ipykernel hands it to a comm callback (header, content, ...).
JupyterMsg = Mapping[str, object]


class Comm(Protocol):
    """A ``comm.base_comm.BaseComm`` (ipykernel's ``Comm``) as the hub uses it."""

    comm_id: str

    def send(self, *, data: Message, buffers: Buffers | None) -> None: ...

    def close(self) -> None: ...

    def on_msg(self, callback: Callable[[JupyterMsg], None]) -> None: ...

    def on_close(self, callback: Callable[[JupyterMsg], None]) -> None: ...


class CommManager(Protocol):
    """The kernel's ``comm.base_comm.CommManager``: where the hub registers its target."""

    def register_target(self, target_name: str, f: Callable[[Comm, JupyterMsg], None]) -> None: ...

    def unregister_target(
        self, target_name: str, f: Callable[[Comm, JupyterMsg], None]
    ) -> object: ...
