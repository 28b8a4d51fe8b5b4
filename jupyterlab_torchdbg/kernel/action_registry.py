"""Panel -> kernel actions: the allowlist and its dispatch, one reply per request.

S3/S4: an action is a name from this registry plus arguments that its validator
(``action_args``) checks before the handler runs; nothing from the frontend is evaluated,
executed or unpickled. R13: replies are cached
by request id, so a duplicate request gets its original answer (marked ``duplicate``)
and the action is not applied twice. R14: malformed input gets an ``error`` reply.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..protocol import MAX_JSON_DEPTH, json_depth

Reply = dict[str, object]
#: Checks the raw ``args`` of a request; returns them cleaned, as the handler reads them.
Validator = Callable[[dict[str, object]], dict[str, Any]]
#: Runs a validated request; returns its ``result`` (JSON-able).
Handler = Callable[[dict[str, Any]], dict[str, object]]

#: Replies remembered for duplicate detection.
REPLY_CACHE = 512


class ActionError(Exception):
    """Raised by validators (code ``invalid_args``) and handlers (``refused``)."""

    def __init__(self, message: str, code: str = "invalid_args") -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ActionSpec:
    name: str
    validate: Validator
    handler: Handler


class ActionRegistry:
    """Dispatches ``action`` messages to registered handlers."""

    def __init__(self, on_error: Callable[[str], None]) -> None:
        self._specs: dict[str, ActionSpec] = {}
        self._replies: OrderedDict[str, Reply] = OrderedDict()
        self._on_error = on_error

    def register(self, name: str, validate: Validator, handler: Handler) -> Callable[[], None]:
        """Add an action; returns a function that removes it."""
        self._specs[name] = ActionSpec(name, validate, handler)

        def remove() -> None:
            if self._specs.get(name) is not None and self._specs[name].handler is handler:
                del self._specs[name]

        return remove

    def names(self) -> list[str]:
        return sorted(self._specs)

    def handle(self, data: object) -> Reply:
        """Validate and run one ``action`` message; always returns exactly one reply."""
        if not isinstance(data, dict):
            return _error(None, "malformed", "an action must be a JSON object")
        raw_id = data.get("request_id")
        request_id = raw_id if isinstance(raw_id, str) and 0 < len(raw_id) <= 128 else None
        if request_id is None:
            return _error(None, "malformed", "request_id must be a non-empty string (max 128)")
        cached = self._replies.get(request_id)
        if cached is not None:
            return {**cached, "duplicate": True}
        reply = self._run(request_id, data)
        self._replies[request_id] = reply
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
            clean = spec.validate(args)
        except ActionError as e:
            return _error(request_id, e.code, f"{name}: {e}")
        try:
            result = spec.handler(clean)
        except ActionError as e:
            return _error(
                request_id, e.code if e.code != "invalid_args" else "refused", f"{name}: {e}"
            )
        except Exception as e:
            self._on_error(f"action:{name}")
            return _error(request_id, "failed", f"{name} failed: {type(e).__name__}")
        return {"method": "ack", "request_id": request_id, "action": name, "result": result}


def _error(request_id: str | None, code: str, message: str) -> Reply:
    return {"method": "error", "request_id": request_id, "code": code, "message": message}
