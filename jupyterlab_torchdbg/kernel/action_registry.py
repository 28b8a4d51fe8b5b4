"""Panel -> kernel actions: the allowlist and its dispatch, one reply per request.

S3/S4: an action is a name from this registry plus arguments that its validator
(``action_args``) checks before the handler runs; nothing from the frontend is evaluated,
executed or unpickled. R13: replies are cached
by (comm, request id), so a duplicate request on the same comm gets its original answer
(marked ``duplicate``) and the action is not applied twice; the same id from another comm
(another tab's panel) is a request of its own. R14: malformed input gets an ``error``
reply and changes nothing.

R43, request ids the kernel cannot echo exactly: an id must be a string of 1..128
characters of well-formed Unicode. One holding a lone surrogate (JSON ``"\\udc00"``)
cannot be encoded as UTF-8 by the kernel's session, so it cannot go back verbatim; it is
answered, like a missing or over-long id, with one ``error`` of code ``malformed`` and
``request_id: null``. The panel (``src/connection/requests.ts``) matches replies by exact
id, so such a reply settles no pending request (and cannot settle a wrong one, which an id
with the surrogate replaced could); the panel itself only sends UUIDs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal, TypeAlias, TypeVar

from ..protocol import MAX_JSON_DEPTH, json_depth, well_formed

if TYPE_CHECKING:
    from ..protocol.messages import Ack, Error

#: The one answer to an ``action`` request (the schema's ``Ack`` and ``Error``).
Reply: TypeAlias = "Ack | Error"
#: The schema's ``Error.code``.
ErrorCode = Literal[
    "protocol_mismatch", "malformed", "unknown_action", "invalid_args", "refused", "failed"
]
#: An action's cleaned args (its validator's result, its handler's argument): a schema
#: TypedDict such as ``messages.ClipArgs``, or a dict.
Args = TypeVar("Args")
#: Checks the raw ``args`` of a request; returns them cleaned, as the handler reads them.
Validator: TypeAlias = Callable[[dict[str, object]], Args]
#: Runs a validated request; returns its ``result`` (JSON-able).
Handler: TypeAlias = Callable[[Args], dict[str, object]]

#: Replies remembered for duplicate detection (over all comms: the cache stays bounded).
REPLY_CACHE = 512
#: The longest request id (the schema's ``RequestId``).
MAX_REQUEST_ID = 128


class ActionError(Exception):
    """Raised by validators (code ``invalid_args``) and handlers (``refused``)."""

    def __init__(self, message: str, code: ErrorCode = "invalid_args") -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ActionSpec:
    name: str
    #: Validates the raw args (raises ``ActionError``); returns the call of the handler.
    prepare: Callable[[dict[str, object]], Callable[[], dict[str, object]]]
    #: The handler as registered (``remove`` compares it).
    handler: object


class ActionRegistry:
    """Dispatches ``action`` messages to registered handlers."""

    def __init__(self, on_error: Callable[[str], None]) -> None:
        self._specs: dict[str, ActionSpec] = {}
        self._replies: OrderedDict[tuple[str, str], Reply] = OrderedDict()
        self._on_error = on_error
        self._local = threading.local()

    def request_id(self) -> str | None:
        """During a handler: the id of the request it answers (an all-rank action names
        it in the ``ranks`` message's ``pending``), else None."""
        return getattr(self._local, "request_id", None)

    def register(
        self, name: str, validate: Validator[Args], handler: Handler[Args]
    ) -> Callable[[], None]:
        """Add an action; returns a function that removes it."""

        def prepare(args: dict[str, object]) -> Callable[[], dict[str, object]]:
            return partial(handler, validate(args))

        self._specs[name] = ActionSpec(name, prepare, handler)

        def remove() -> None:
            if self._specs.get(name) is not None and self._specs[name].handler is handler:
                del self._specs[name]

        return remove

    def names(self) -> list[str]:
        return sorted(self._specs)

    def handle(self, data: object, origin: str = "") -> Reply:
        """Validate and run one ``action`` message from the comm ``origin``; always
        returns exactly one reply."""
        if not isinstance(data, dict):
            return _error(None, "malformed", "an action must be a JSON object")
        request_id = echoable_request_id(data)
        if request_id is None:
            return _error(
                None,
                "malformed",
                "request_id must be a non-empty string of well-formed Unicode (max 128)",
            )
        key = (origin, request_id)
        cached = self._replies.get(key)
        if cached is not None:
            again = cached.copy()
            again["duplicate"] = True
            return again
        reply = self._run(request_id, data)
        self._replies[key] = reply
        while len(self._replies) > REPLY_CACHE:
            self._replies.popitem(last=False)
        return reply

    def _run(self, request_id: str, data: dict[str, object]) -> Reply:
        if json_depth(data) > MAX_JSON_DEPTH:
            return _error(request_id, "malformed", "message nested too deeply")
        name = data.get("action")
        args = data.get("args", {})
        if not isinstance(name, str):
            return _error(request_id, "malformed", "action must be a string")
        spec = self._specs.get(name)
        if spec is None:
            shown = name[:64]
            return _error(request_id, "unknown_action", f"unknown action {shown!r}")
        if not isinstance(args, dict):
            return _error(request_id, "invalid_args", f"{name}: args must be an object")
        try:
            call = spec.prepare(args)
        except ActionError as e:
            return _error(request_id, e.code, f"{name}: {e}")
        self._local.request_id = request_id
        try:
            result = call()
        except ActionError as e:
            return _error(
                request_id, e.code if e.code != "invalid_args" else "refused", f"{name}: {e}"
            )
        except Exception as e:
            self._on_error(f"action:{name}")
            return _error(request_id, "failed", f"{name} failed: {type(e).__name__}")
        finally:
            self._local.request_id = None
        return {"method": "ack", "request_id": request_id, "action": name, "result": result}


def echoable_request_id(data: object) -> str | None:
    """The message's request id when a reply can carry it back verbatim, else None."""
    raw = data.get("request_id") if isinstance(data, dict) else None
    if isinstance(raw, str) and 0 < len(raw) <= MAX_REQUEST_ID and well_formed(raw):
        return raw
    return None


def _error(request_id: str | None, code: ErrorCode, message: str) -> Error:
    return {"method": "error", "request_id": request_id, "code": code, "message": message}
