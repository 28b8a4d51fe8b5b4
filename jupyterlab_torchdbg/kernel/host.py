"""What a feature may use of the loaded extension: the ``Host`` protocol.

Features (exceptions, grads, control, memory) are given a ``Host`` and nothing else of the
extension: the shell, the outgoing stream and comm hub, the action registry and the error
counter. They never import ``extension`` (which imports them), never attach themselves to
it, and never reach another feature through it: what one feature needs of another is
passed to it as an argument where ``extension.py`` wires them (see ``Extension.start``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .action_registry import ActionRegistry
    from .capabilities import Nvml
    from .comms import CommHub
    from .runs import Runs
    from .stream import Stream


class ShellEvents(Protocol):
    """IPython's ``shell.events`` (an ``EventManager``): what the extension calls."""

    def register(self, name: str, cb: Callable[..., object], /) -> None: ...

    def unregister(self, name: str, cb: Callable[..., object], /) -> None: ...

    def trigger(self, name: str, /, *args: object) -> None: ...


class Shell(Protocol):
    """IPython's ``InteractiveShell`` as the extension uses it directly.

    Everything else of the shell (``kernel``, ``compile``, ``user_ns_hidden``,
    ``InteractiveTB``, ``displayhook``) is optional and read with ``getattr``.
    """

    @property
    def user_ns(self) -> dict[str, object]: ...

    @property
    def events(self) -> ShellEvents: ...

    #: The last cell's ``ExecutionResult`` (the memory autopsy clears it).
    last_execution_result: object


class Host(Protocol):
    """The extension as its features see it."""

    #: IPython's InteractiveShell (``user_ns``, ``events``).
    shell: Shell
    #: A random id for this load of the extension (ids of messages derive from it).
    session_id: str
    stream: Stream
    hub: CommHub
    #: The runs (runs.py): which run is current, idle or not, run start / end events.
    runs: Runs
    actions: ActionRegistry
    nvml: Nvml

    def count_error(self, site: str) -> None:
        """Record an error caught inside the tool (never re-raised into user code, R11)."""

    def others_running(self) -> bool:
        """A cell runs on another thread than this one (a probe cell on a subshell)."""
