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

#: Every action: each has a named result schema (``x-result`` -> ``$defs/...Result``).
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
    "empty_cache",
    "release_refs",
    "record_memory",
    "save_checkpoint",
    "set_memory_guard",
    "measure_activations",
    "open_record",
    "dismiss_record",
    "export_tensorboard",
}

ROW = {
    "device": "cuda:0",
    "allocated_before": 9663676416,
    "allocated_after": 1073741824,
    "reserved_before": 12884901888,
    "reserved_after": 1073741824,
}
SITE = {"file": "w/train.py", "line": 12, "function": "step", "bytes": 4096, "count": 2}
GUARD = {"pause_at": 0.9, "limit": 2**34, "limit_source": "cgroup", "tripped": None}
SNAPSHOT_STOP = {
    "state": "off",
    "max_entries": None,
    "since": None,
    "time": 1700000000.5,
    "file": "torchdbg_memory_20261205-170000.pickle",
    "bytes": 2048,
    "entries": 10,
    "oom_events": 0,
    "top_sites": [SITE],
    "live_sites": [],
}
#: A result as each of the memory, record and export handlers returns it (one per shape).
NEW_RESULTS: list[tuple[str, dict[str, Any]]] = [
    ("empty_cache", {"devices": [ROW], "freed_bytes": 11811160064}),
    ("empty_cache", {"devices": [], "freed_bytes": 0}),
    (
        "release_refs",
        {
            "cleared": ["sys.last_traceback", "InteractiveTB.tb", "Out/_/__/___"],
            "collected": 212,
            "devices": [ROW],
            "rss_before": 3473408000,
            "rss_after": None,
            "note": "%debug on the last error is no longer possible",
        },
    ),
    ("record_memory", {"state": "on", "max_entries": 100000, "since": 1700000000.0}),
    ("record_memory", {"state": "armed", "max_entries": 100000, "since": None, "note": "x"}),
    ("record_memory", {"state": "off", "max_entries": None, "since": None, "note": "never"}),
    ("record_memory", SNAPSHOT_STOP),
    (
        "save_checkpoint",
        {
            "file": "checkpoint_20261205-170000.pt",
            "bytes": 1234,
            "models": ["model"],
            "optimizers": ["opt"],
            "overwritten": False,
        },
    ),
    ("set_memory_guard", {"guard": GUARD}),
    ("measure_activations", {"state": "armed"}),
    ("measure_activations", {"state": "failed"}),
    ("open_record", {"series": 4, "alerts": 0}),
    ("dismiss_record", {}),
    ("export_tensorboard", {"path": "torchdbg-runs/nb-run1-20261205-170000", "scalars": 40}),
]


def _ack(action: str, result: dict[str, Any]) -> dict[str, Any]:
    """The ack the kernel's registry sends for a handler that returns ``result``."""
    registry = ActionRegistry(on_error=lambda site: None)
    registry.register(action, lambda args: args, lambda args: result)
    return registry.handle({"method": "action", "request_id": "r1", "action": action, "args": {}})


def test_result_schemas_are_valid_and_cover_every_action() -> None:
    schemas = action_result_schemas()
    assert set(schemas) == TYPED
    for schema in schemas.values():
        Draft202012Validator.check_schema(schema)
    # every name is an action of the allowlist
    actions = {
        load_schema()["$defs"][r["$ref"].removeprefix("#/$defs/")]["properties"]["action"]["const"]
        for r in load_schema()["$defs"]["Action"]["oneOf"]
    }
    assert set(schemas) == actions


def test_every_result_is_a_named_definition() -> None:
    """``x-result`` is a ``$ref`` to a ``$defs`` entry, so the generators name its type
    (``ClipResult``: a TypedDict in messages.py, ``IClipResult`` in generated.ts)."""
    import jupyterlab_torchdbg.protocol.messages as py_types

    defs = load_schema()["$defs"]
    for r in defs["Action"]["oneOf"]:
        definition = defs[r["$ref"].removeprefix("#/$defs/")]
        ref = definition["x-result"]
        assert set(ref) == {"$ref"}, definition["properties"]["action"]["const"]
        name = ref["$ref"].removeprefix("#/$defs/")
        assert name in defs and name.endswith("Result"), name
        assert hasattr(py_types, name), name


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


@pytest.mark.parametrize(("action", "result"), NEW_RESULTS)
def test_memory_record_and_export_results_match_their_schemas(
    action: str, result: dict[str, Any]
) -> None:
    validate_kernel_message(_ack(action, result))


@pytest.mark.parametrize(("action", "result"), NEW_RESULTS)
def test_memory_record_and_export_results_reject_a_missing_or_unknown_field(
    action: str, result: dict[str, Any]
) -> None:
    schema = Draft202012Validator(action_result_schemas()[action])
    for field in result:
        wrong = {k: v for k, v in result.items() if k != field}
        assert not schema.is_valid(wrong), f"{action} without {field}"
    assert not schema.is_valid({**result, "unexpected": 1}), action


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
        # the memory, record and export results
        ("empty_cache", {"devices": [{**ROW, "device": 0}], "freed_bytes": 0}),
        ("empty_cache", {"devices": [], "freed_bytes": -1}),
        ("release_refs", {**NEW_RESULTS[2][1], "cleared": ["sys.modules"]}),
        ("record_memory", {"state": "off", "max_entries": 100000, "since": None, "note": "x"}),
        ("record_memory", {"state": "on", "max_entries": 100000}),
        ("record_memory", {**SNAPSHOT_STOP, "note": "both"}),
        ("record_memory", {**SNAPSHOT_STOP, "top_sites": [{**SITE, "bytes": "4096"}]}),
        ("save_checkpoint", {**NEW_RESULTS[7][1], "filename": "c.pt"}),
        ("set_memory_guard", {"guard": {**GUARD, "pause_at": "0.9"}}),
        ("set_memory_guard", {"pause_at": 0.9}),
        ("measure_activations", {"state": "measuring"}),
        ("open_record", {"series": 4}),
        ("dismiss_record", {"dismissed": True}),
        ("export_tensorboard", {"path": "/abs/torchdbg-runs/x", "scalars": 1}),
    ],
)
def test_a_reply_that_drifts_from_its_schema_fails(action: str, result: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        validate_kernel_message(_ack(action, result))
