"""Each action's result has a schema (its definition's ``x-result``); the test clients
check every ``ack`` the kernel sends against it, so a reply that drifts from the schema
fails the test that received it."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator, ValidationError
from kernel_client import validate_kernel_message

from jupyterlab_torchdbg.kernel.action_registry import ActionRegistry
from jupyterlab_torchdbg.protocol import action_result_schemas, load_schema

#: Actions whose replies the panel reads field by field (control, ranks, grads).
TYPED = {
    "snapshot",
    "clear_history",
    "set_stride",
    "set_thresholds",
    "clear_alerts",
    "replay_step",
    "skip_nonfinite",
    "clip",
    "unclip",
    "pause",
    "resume",
    "step",
    "scale_lr",
    "set_lr",
    "reset_lr",
    "ranks_clip",
    "ranks_unclip",
    "ranks_pause",
    "ranks_resume",
    "ranks_scale_lr",
}


def _ack(action: str, result: dict[str, Any]) -> dict[str, Any]:
    """The ack the kernel's registry sends for a handler that returns ``result``."""
    registry = ActionRegistry(on_error=lambda site: None)
    registry.register(action, lambda args: args, lambda args: result)
    return registry.handle({"method": "action", "request_id": "r1", "action": action, "args": {}})


def test_result_schemas_are_valid_and_cover_the_typed_actions() -> None:
    schemas = action_result_schemas()
    assert TYPED <= set(schemas)
    for schema in schemas.values():
        Draft202012Validator.check_schema(schema)
    # every name is an action of the allowlist
    actions = {
        load_schema()["$defs"][r["$ref"].removeprefix("#/$defs/")]["properties"]["action"]["const"]
        for r in load_schema()["$defs"]["Action"]["oneOf"]
    }
    assert set(schemas) <= actions


@pytest.mark.parametrize(
    ("action", "result"),
    [
        ("clip", {"clip": 1.5, "applies": "from the next optimizer step"}),
        ("unclip", {"clip": None}),
        ("pause", {"paused": True, "applies": "at the next optimizer step"}),
        ("resume", {"paused": False}),
        ("set_lr", {"optimizer": "o0", "pending": True, "applies": "x", "lr": 0.01}),
        ("reset_lr", {"optimizer": "o0", "lr_scale": None, "applies": "now"}),
        ("ranks_clip", {"at_step": 57, "ranks": [0, 1]}),
        ("ranks_resume", {"ranks": [1]}),
        ("set_stride", {"mode": "auto", "stride": None}),
    ],
)
def test_a_reply_that_matches_its_schema_passes(action: str, result: dict[str, Any]) -> None:
    validate_kernel_message(_ack(action, result))


@pytest.mark.parametrize(
    ("action", "result"),
    [
        # a field missing
        ("clip", {"clip": 1.5}),
        ("ranks_clip", {"ranks": [0, 1]}),
        # a field renamed
        ("ranks_pause", {"step": 57, "ranks": [0, 1]}),
        # a field of another type
        ("ranks_unclip", {"at_step": "57", "ranks": [0, 1]}),
        ("set_lr", {"optimizer": "o0", "pending": True, "applies": "x", "lr": "0.01"}),
        # a field the schema does not name
        ("resume", {"paused": False, "at": 3}),
        # a value the schema rules out
        ("pause", {"paused": False, "applies": "at the next optimizer step"}),
    ],
)
def test_a_reply_that_drifts_from_its_schema_fails(action: str, result: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        validate_kernel_message(_ack(action, result))
